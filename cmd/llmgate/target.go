package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"llmgate/internal/admin"
	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
	"llmgate/internal/redact"
)

// defaultGatewayURL is where a gateway listens when nothing says otherwise.
const defaultGatewayURL = "http://" + config.DefaultListen

// gatewayFlags are --url and --master-key, the way every command that
// talks to a running gateway's admin API names them.
type gatewayFlags struct {
	url       string
	masterKey string
}

// register adds --url and --master-key; urlFallback says where the
// address comes from when --url is not given.
func (g *gatewayFlags) register(fs *pflag.FlagSet, urlFallback string) {
	fs.StringVar(&g.url, "url", "", "The llmgate gateway's address, e.g. "+defaultGatewayURL+"; when not given, "+urlFallback)
	fs.StringVar(&g.masterKey, "master-key", "", "The gateway's master key; when not given, $LLMGATE_MASTER_KEY (prefer the environment: flags show in ps)")
}

// key returns the master key from --master-key or LLMGATE_MASTER_KEY.
func (g *gatewayFlags) key() string {
	if k := strings.TrimSpace(g.masterKey); k != "" {
		return k
	}
	return strings.TrimSpace(os.Getenv("LLMGATE_MASTER_KEY"))
}

// resolveURL returns the gateway's address: --url, else LLMGATE_URL (both
// explicit: the user named a gateway), else the listen address of cfg when
// there is one, else the default.
func (g *gatewayFlags) resolveURL(cfg *config.Config) (url string, explicit bool) {
	if g.url != "" {
		return g.url, true
	}
	if u := strings.TrimSpace(os.Getenv("LLMGATE_URL")); u != "" {
		return u, true
	}
	if cfg != nil {
		if u := listenURL(cfg); u != "" {
			return u, false
		}
	}
	return defaultGatewayURL, false
}

// listenURL is the address a client on this machine reaches a gateway
// listening on cfg.Listen at ("" for port 0, which no one can guess).
func listenURL(cfg *config.Config) string {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil || port == "0" || port == "" {
		return ""
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// unreachable is the error for a gateway that did not answer at base;
// how says what to set. When the address was not given (explicit false:
// no --url, no LLMGATE_URL) but LLMGATE_BASE_URL names another one, it
// says so: bench, doctor, connect and mcp read that variable (connect env
// prints it), the admin commands read LLMGATE_URL.
func unreachable(base string, explicit bool, err error, how string) error {
	hint := ""
	if b := strings.TrimSpace(os.Getenv("LLMGATE_BASE_URL")); !explicit && b != "" {
		root := strings.TrimSuffix(strings.TrimRight(b, "/"), "/v1")
		if root != strings.TrimRight(base, "/") {
			hint = fmt.Sprintf("; LLMGATE_BASE_URL is %s, but this command reads --url or LLMGATE_URL: export LLMGATE_URL=%s", b, root)
		}
	}
	return fmt.Errorf("cannot reach the gateway at %s: %w (is 'llmgate serve' running? %s)%s", base, err, how, hint)
}

// gatewayAnswers reports whether an llmgate gateway answers at base: its
// /healthz says {"status":"ok"}.
func gatewayAnswers(ctx context.Context, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"status":"ok"`)
}

// dbFlags are the flags of keys and usage: the running gateway (--url,
// --master-key) and, when none answers, its database (-c, --database).
type dbFlags struct {
	gatewayFlags
	config   string
	database string
}

func (d *dbFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&d.config, "config", "c", "", "Config file, for its listen address and database; when not given, $LLMGATE_CONFIG")
	fs.StringVar(&d.database, "database", "", "Work on this database instead of a running gateway: a SQLite file or a postgres:// URL")
	d.gatewayFlags.register(fs, "$LLMGATE_URL, else the config's listen address, else "+defaultGatewayURL)
}

// client returns an admin API client: over HTTP to the running gateway,
// else bound in process to the admin handler on the database, so both
// modes run the same code. It says on notes which one it picked when the
// user did not. close releases the database.
func (d *dbFlags) client(ctx context.Context, notes io.Writer) (c *admin.Client, closeFn func(), err error) {
	if d.url != "" && d.database != "" {
		return nil, nil, errors.New("give --url (a running gateway) or --database (a database file), not both")
	}
	if d.database != "" {
		return d.localClient(ctx, d.database, notes, "")
	}
	cfg, err := loadAddressConfig(d.config)
	if err != nil {
		return nil, nil, err
	}
	url, explicit := d.resolveURL(cfg)
	if explicit || gatewayAnswers(ctx, url) {
		mk := d.key()
		if mk == "" {
			return nil, nil, fmt.Errorf("the gateway at %s needs its master key: pass --master-key or set LLMGATE_MASTER_KEY "+
				"(serve prints it at its first start, the demo in its banner); to work on a database file instead, pass --database FILE", url)
		}
		if !explicit {
			fmt.Fprintf(notes, "llmgate: using the gateway at %s\n", url)
		}
		return admin.NewClient(url, mk), func() {}, nil
	}
	db := config.DefaultDatabase
	if cfg != nil && cfg.Database != "" {
		db = cfg.Database
	}
	return d.localClient(ctx, db, notes, url)
}

// localClient opens the database and serves admin calls on it in process.
// probed is the gateway address that did not answer ("" when --database
// was given); then a missing SQLite file is an error rather than a new,
// empty database that no gateway reads.
func (d *dbFlags) localClient(ctx context.Context, db string, notes io.Writer, probed string) (*admin.Client, func(), error) {
	shown := describeDatabase(db)
	if probed != "" {
		if !isPostgres(db) {
			if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("no gateway answers at %s and there is no database at %s: start the gateway (llmgate serve), "+
					"pass --url for one elsewhere, or --database FILE (or -c CONFIG) for the database to work on", probed, shown)
			}
		}
		fmt.Fprintf(notes, "llmgate: no gateway answers at %s; using the database %s\n", probed, shown)
	} else {
		fmt.Fprintf(notes, "llmgate: using the database %s\n", shown)
	}
	st, err := gateway.OpenStore(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	as, ok := st.(admin.Store)
	if !ok {
		st.Close()
		return nil, nil, errors.New("this database does not support key management")
	}
	h := admin.New(admin.Options{Store: as, KeyListHint: "'llmgate keys list' shows the ids",
		Auth: func(*http.Request) (keys.Principal, error) { return keys.Principal{Master: true}, nil }})
	return admin.NewLocalClient(h), func() { st.Close() }, nil
}

// databaseName is the database of commands that work on it only:
// --database, else the config's, else llmgate.db.
func (d *dbFlags) databaseName() (string, error) {
	if d.database != "" {
		return d.database, nil
	}
	cfg, err := loadAddressConfig(d.config)
	if err != nil {
		return "", err
	}
	if cfg != nil && cfg.Database != "" {
		return cfg.Database, nil
	}
	return config.DefaultDatabase, nil
}

// loadAddressConfig reads only what keys and usage need from a config
// file: where the gateway listens (listen, tls_cert_file) and its database.
// The rest (backends, their API keys) is not read or checked, so managing
// keys never needs a provider's key in the environment. nil when no file
// is named (-c or LLMGATE_CONFIG).
func loadAddressConfig(path string) (*config.Config, error) {
	if path == "" {
		path = os.Getenv("LLMGATE_CONFIG")
	}
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open config: %w", err)
	}
	var doc struct {
		Listen      string `yaml:"listen"`
		Database    string `yaml:"database"`
		TLSCertFile string `yaml:"tls_cert_file"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg := &config.Config{Source: path}
	for _, f := range []struct {
		key string
		in  string
		out *string
	}{{"listen", doc.Listen, &cfg.Listen}, {"database", doc.Database, &cfg.Database}, {"tls_cert_file", doc.TLSCertFile, &cfg.TLSCertFile}} {
		v, err := config.ExpandEnv(f.in, os.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, f.key, err)
		}
		*f.out = v
	}
	if cfg.Listen == "" {
		cfg.Listen = config.DefaultListen
	}
	if cfg.Database == "" {
		cfg.Database = config.DefaultDatabase
	}
	return cfg, nil
}

func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// describeDatabase names a database for messages: a SQLite file by its
// absolute path, a PostgreSQL URL without its password.
func describeDatabase(db string) string {
	if isPostgres(db) {
		return redact.Secrets(db)
	}
	if abs, err := filepath.Abs(db); err == nil {
		return abs
	}
	return db
}

// deprecatedAlias adds --old as a hidden alias of --name: it still works
// for one release and warns when used.
func deprecatedAlias(fs *pflag.FlagSet, p *string, old, name string) {
	fs.StringVar(p, old, *p, "Deprecated: use --"+name)
	_ = fs.MarkDeprecated(old, "use --"+name+" instead (--"+old+" will be removed in the next release)")
	_ = fs.SetAnnotation(old, replacementAnnotation, []string{name})
}
