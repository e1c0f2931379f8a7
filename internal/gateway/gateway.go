// Package gateway assembles a running gateway from a configuration: store,
// master key, key verifier, usage ledger, local engines, the routing table
// and its holder, the response store, the relay, the edge server and the
// HTTP server. The serve command, demo mode and end-to-end tests all start
// gateways here.
package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/console"
	"llmgate/internal/dnsdisc"
	"llmgate/internal/engine"
	"llmgate/internal/engineinfo"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/metrics"
	"llmgate/internal/netlimit"
	"llmgate/internal/policy"
	"llmgate/internal/relay"
	"llmgate/internal/respstore"
	"llmgate/internal/router"
	"llmgate/internal/server"
	"llmgate/internal/store"
	"llmgate/internal/store/postgres"
	"llmgate/internal/store/sqlite"
)

// Options are the inputs of a gateway beyond its configuration.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// MasterKey overrides LLMGATE_MASTER_KEY; empty means read the
	// environment, then the stored hash, then generate one.
	MasterKey string
	// Notice receives one-time messages for the operator (a generated
	// master key); nil means stderr.
	Notice io.Writer
	// Listener, when set, is used instead of listening on Config.Listen.
	Listener net.Listener
	// LedgerOptions tunes batching (tests use small intervals).
	LedgerOptions ledger.Options
	// Admission admits every model request (the relay's, with the
	// gateway's metrics); Middleware wraps the server's handler (see
	// server.Options).
	Admission  policy.Admission
	Middleware []func(http.Handler) http.Handler
	// Resolver, when set, answers DNS discovery's lookups for a backend
	// (tests inject one); nil means the system's or discovery_resolver.
	Resolver func(b *config.Backend) dnsdisc.Resolver
	// Leaser, when set, leases the backends it manages instead of the
	// gateway's engine manager (tests stand in a fake local engine).
	Leaser router.Leaser
}

// Gateway is a running gateway.
type Gateway struct {
	Config   *config.Config
	Store    store.Store
	Verifier *keys.Verifier
	Ledger   *ledger.Ledger
	Server   *server.Server
	// Tables holds the routing table being served: the server, the admin
	// views and the engines read it; start, reload and discovery store it.
	Tables *router.Current
	// Metrics are the Prometheus collectors served at /metrics.
	Metrics *metrics.Metrics
	// Console is the web console at /ui (nil when LLMGATE_CONSOLE=off).
	Console     *console.Console
	stopTracing func(context.Context) error
	// Engines runs the configured local engines (none when the config has
	// no engines: section).
	Engines *engine.Manager
	// HTTP serves the listener: net/http's Server (with TLS when
	// configured).
	HTTP   httpServer
	Addr   string // actual listen address
	log    *slog.Logger
	ln     net.Listener
	scheme string // "https" when the listener serves TLS; "" for http
	// leaser is every table's router.Leaser: the engine manager, or
	// Options.Leaser.
	leaser router.Leaser
	// engineInfo learns from each deployment's engine (context lengths,
	// tokenizer).
	engineInfo *engineinfo.Learner
	// responses stores Responses API answers (nil when storage is off).
	responses *respstore.Store
	cancel    context.CancelFunc
	served    chan error
	// disc resolves the backends with discovery; tableMu serializes the
	// table swaps of reloads and discovery, rawCfg is the configuration
	// as loaded (before discovery expands it).
	disc         *dnsdisc.Discoverer
	tableMu      sync.Mutex
	rawCfg       *config.Config
	tablesClosed bool
	acct         *accounting
}

// OpenStore opens the store named by a database setting.
func OpenStore(ctx context.Context, database string) (store.Store, error) {
	if strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://") {
		return postgres.Open(ctx, database)
	}
	return sqlite.Open(ctx, database)
}

// Start opens everything and begins serving. Close stops it gracefully.
//
// The listener is opened first and the usage journal before the master
// key: a gateway that cannot serve (port taken, bad certificate, a spool
// it cannot open) stops before a master key is generated, stored and
// shown. (Later failures, such as a bad OTLP endpoint, still come after.)
func Start(ctx context.Context, opt Options) (g *Gateway, err error) {
	cfg := opt.Config
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	var undo []func() // run in reverse when Start fails
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	var certs *certReloader
	if cfg.TLSCertFile != "" {
		if certs, err = newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, log); err != nil {
			return nil, err
		}
	}
	ln := opt.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("listen on %s: %w (is another llmgate or server using the port? set listen: in the config or --listen)", cfg.Listen, err)
		}
	}
	ln = netlimit.Limit(ln, cfg.ConnectionLimit(), log) // max_connections
	undo = append(undo, func() { ln.Close() })
	st, err := OpenStore(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { st.Close() })
	g = &Gateway{Config: cfg, Store: st, log: log, served: make(chan error, 1), ln: ln, Addr: ln.Addr().String()}
	if certs != nil {
		g.scheme = "https"
	}
	// The journal before the master key: a spool that cannot be opened
	// stops the start before a new key is generated and shown.
	lopt, err := g.withSpool(opt.LedgerOptions)
	if err != nil {
		return nil, err
	}
	g.Ledger = ledger.NewLedger(st, lopt, log)
	undo = append(undo, func() { g.Ledger.Close(ctx) })
	masterHash, err := ensureMaster(ctx, st, opt)
	if err != nil {
		return nil, err
	}
	if g.Verifier, err = keys.NewVerifier(ctx, st, masterHash, log); err != nil {
		return nil, err
	}
	if err := g.startObservability(ctx, &opt); err != nil {
		return nil, err
	}
	if err := g.startAccounting(ctx, &opt); err != nil {
		return nil, err
	}
	undo = append(undo, g.stopAccounting)
	g.engineInfo = engineinfo.New(engineinfo.Options{Logger: log, OnKind: func(backend string, k engineinfo.Kind) {
		if t := g.Tables.Load(); t != nil {
			t.EngineLearned(backend, string(k))
		}
	}})
	g.Tables = &router.Current{}
	if g.Engines, err = engine.New(cfg, engine.Options{Logger: log, OnReady: g.engineInfo.Refresh, Tables: g.Tables}); err != nil {
		return nil, err
	}
	g.leaser = g.Engines
	if opt.Leaser != nil {
		g.leaser = opt.Leaser
	}
	g.startDiscovery(ctx, cfg, &opt)
	table := g.newTable(cfg, nil)
	g.Tables.Store(table)
	// The edge hands each decoded request to the relay, which resolves it
	// on the table the edge loaded, admits it, runs its attempts and has
	// the ledger record it.
	adm := g.Metrics.Admission(opt.Admission)
	var responses *respstore.Store
	if on, ttl := cfg.ResponsesStorage(); on {
		responses = respstore.New(g.Store, ttl, log)
	}
	g.responses = responses
	rl := relay.New(relay.Options{Ledger: g.Ledger, Observer: g.observer(), Admission: adm, Responses: responses, Engines: g.engineInfo, Logger: log})
	sopt := server.Options{Tables: g.Tables, Relay: rl, Verifier: g.Verifier, Ready: g.Ledger.Healthy, Logger: log, Engines: g.engineInfo, MaxBodyBytes: cfg.MaxBodyBytes,
		Responses: responses, Middleware: opt.Middleware}
	sopt.Precheck, _ = adm.(policy.Prechecker)
	if cfg.AccessLogOn() {
		sopt.AccessLog = accessLog{log: log}.unrecorded
	}
	sopt.BodyReadTimeout, sopt.MaxBodyReadsPerKey = cfg.BodyReadLimit()
	sopt.MaxLargeBodyMemory = cfg.LargeBodyMemory()
	g.Server = server.New(sopt)
	engines := g.Engines.Handler(g.Server.Authenticate)
	g.Server.Handle(engine.AdminPrefix, engines)
	g.Server.Handle(engine.AdminPrefix+"/", engines)
	g.mountAdmin()
	g.mountObservability()
	var connState func(net.Conn, http.ConnState)
	if lim, ok := ln.(*netlimit.Listener); ok {
		connState = lim.ConnState // idle keep-alive connections make room at the cap
	}
	g.HTTP = newHTTPServer(g.Server, log, certs, connState)
	wctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go g.Verifier.Watch(wctx, 500*time.Millisecond)
	go g.disc.Run(wctx)
	go func() { g.served <- g.HTTP.Serve(ln) }()
	g.Engines.Start()
	go g.learnContexts(wctx, table)
	return g, nil
}

// LogWarnings logs what the configuration says that is accepted but
// ignored (config.Config.Warnings), one line each.
func LogWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config: " + w)
	}
}

// learnContexts asks the backends for their models' context lengths at
// start, so that output limits are fitted from the first request on (local
// engines, which are not running yet, are asked when first used).
func (g *Gateway) learnContexts(ctx context.Context, t *router.Table) {
	for _, name := range t.Models() {
		r, err := t.Route(name)
		if err != nil {
			continue
		}
		// Every deployment: the admission reserves for the context that
		// leaves the most output, whichever deployment serves.
		for _, d := range r.Deployments {
			if t.Leaser(d.Backend.Name) != nil {
				continue
			}
			if l := g.engineInfo.Lookup(ctx, r.ContextWindow, d.Backend, d.UpstreamModel); l.Tokens > 0 {
				g.log.Debug("model context length", "model", name, "backend", d.Backend.Name, "tokens", l.Tokens, "source", l.Source)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// httpServer is what the gateway needs of an HTTP server.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// newHTTPServer returns net/http's server for the listener: HTTP/1.1, and
// HTTP/2 too with TLS. connState, when set, hears of every connection's
// state (the connection cap's).
func newHTTPServer(h http.Handler, log *slog.Logger, certs *certReloader, connState func(net.Conn, http.ConnState)) httpServer {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ConnState: connState}
	if certs == nil {
		return s
	}
	s.TLSConfig = certs.tlsConfig("h2", "http/1.1")
	return tlsStdServer{s}
}

// URL is the base URL clients use, with /v1.
func (g *Gateway) URL() string {
	if g.scheme == "" {
		return "http://" + g.Addr + "/v1"
	}
	return g.scheme + "://" + g.Addr + "/v1"
}

// Close stops accepting requests, waits for requests in flight (up to the
// context's deadline), flushes the ledger and closes the store.
func (g *Gateway) Close(ctx context.Context) error {
	err := g.HTTP.Shutdown(ctx)
	if err != nil {
		g.HTTP.Close()
	}
	g.cancel()
	if eerr := g.Engines.Close(ctx); eerr != nil {
		err = errors.Join(err, fmt.Errorf("stop engines: %w", eerr))
	}
	g.stopAccounting()
	if lerr := g.Ledger.Close(ctx); lerr != nil {
		err = errors.Join(err, fmt.Errorf("flush usage ledger: %w", lerr))
	}
	g.tableMu.Lock()
	g.tablesClosed = true
	g.Tables.Load().Close()
	g.tableMu.Unlock()
	if oerr := g.stopObservability(ctx); oerr != nil {
		err = errors.Join(err, oerr)
	}
	if g.responses != nil {
		g.responses.Close() // its purge in flight uses the store
	}
	if serr := g.Store.Close(); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

const masterSetting = "master_key_sha256"

// ensureMaster returns the master key's hash. LLMGATE_MASTER_KEY wins; else
// the stored hash; else a new key is generated, printed once, and only its
// hash kept.
func ensureMaster(ctx context.Context, st store.Store, opt Options) ([32]byte, error) {
	var zero [32]byte
	secret := opt.MasterKey
	if secret == "" {
		secret = strings.TrimSpace(os.Getenv("LLMGATE_MASTER_KEY"))
	}
	if secret != "" {
		return keys.HashBytes(secret), nil
	}
	stored, err := st.GetSetting(ctx, masterSetting)
	if err != nil {
		return zero, fmt.Errorf("read master key: %w", err)
	}
	if stored != "" {
		if raw, err := hex.DecodeString(stored); err == nil && len(raw) == 32 {
			return [32]byte(raw), nil
		}
	}
	secret, err = keys.Generate()
	if err != nil {
		return zero, err
	}
	if err := st.SetSetting(ctx, masterSetting, keys.Hash(secret)); err != nil {
		return zero, fmt.Errorf("store master key hash: %w", err)
	}
	w := opt.Notice
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "\n  Generated master key (shown once, only its hash is stored):\n\n      %s\n\n"+
		"  Save it now: it manages keys and can call every model. To choose your own,\n"+
		"  set LLMGATE_MASTER_KEY; to replace a lost one, run 'llmgate keys reset-master'.\n\n", secret)
	return keys.HashBytes(secret), nil
}

// ResetMaster generates a new master key, stores its hash and returns it.
func ResetMaster(ctx context.Context, st store.Store) (string, error) {
	secret, err := keys.Generate()
	if err != nil {
		return "", err
	}
	return secret, st.SetSetting(ctx, masterSetting, keys.Hash(secret))
}

// CreateKey issues a new virtual key and returns the record and the secret,
// which is not stored and cannot be shown again.
func CreateKey(ctx context.Context, st keys.Store, k keys.Key) (*keys.Key, string, error) {
	secret, err := keys.Generate()
	if err != nil {
		return nil, "", err
	}
	k.ID = keys.NewID()
	k.Hash = keys.Hash(secret)
	k.Hint = keys.Hint(secret)
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now()
	}
	if err := st.CreateKey(ctx, &k); err != nil {
		return nil, "", err
	}
	return &k, secret, nil
}
