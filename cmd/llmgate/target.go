package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"llmgate/internal/admin"
	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/keys"
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

// resolveURL returns the gateway's address: --url, else LLMGATE_URL,
// else the default.
func (g *gatewayFlags) resolveURL() string {
	if g.url != "" {
		return g.url
	}
	if u := strings.TrimSpace(os.Getenv("LLMGATE_URL")); u != "" {
		return u
	}
	return defaultGatewayURL
}

// dbFlags are the flags of keys and usage: a running gateway (--url,
// --master-key) or the database (-c, --database).
type dbFlags struct {
	gatewayFlags
	config   string
	database string
}

func (d *dbFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&d.config, "config", "c", "", "Config file, for its database; when not given, $LLMGATE_CONFIG")
	fs.StringVar(&d.database, "database", "", "Database: a SQLite file or a postgres:// URL; when not given, the config's, else llmgate.db")
	d.gatewayFlags.register(fs, "the database is used instead")
}

// client returns an admin API client: over HTTP with --url, else bound
// in process to the admin handler on the local database, so both modes
// run the same code. close releases the database.
func (d *dbFlags) client(ctx context.Context, _ io.Writer) (c *admin.Client, closeFn func(), err error) {
	if d.url != "" {
		mk := d.key()
		if mk == "" {
			return nil, nil, errors.New("--url needs the gateway's master key: pass --master-key or set LLMGATE_MASTER_KEY")
		}
		return admin.NewClient(d.url, mk), func() {}, nil
	}
	db, err := d.databaseName()
	if err != nil {
		return nil, nil, err
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
	h := admin.New(admin.Options{Store: as, Auth: func(*http.Request) (keys.Principal, error) { return keys.Principal{Master: true}, nil }})
	c = admin.NewClient("http://local", "")
	c.HTTP = &http.Client{Transport: handlerTransport{h}}
	return c, func() { st.Close() }, nil
}

// handlerTransport serves requests with a handler in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// databaseName is the database of commands that work on it only:
// --database, else the config's, else llmgate.db.
func (d *dbFlags) databaseName() (string, error) {
	if d.database != "" {
		return d.database, nil
	}
	cfg, err := loadConfig(d.config)
	if err != nil {
		return "", err
	}
	if cfg != nil && cfg.Database != "" {
		return cfg.Database, nil
	}
	return config.DefaultDatabase, nil
}

// deprecatedAlias adds --old as a hidden alias of --name: it still works
// for one release and warns when used.
func deprecatedAlias(fs *pflag.FlagSet, p *string, old, name string) {
	fs.StringVar(p, old, *p, "Deprecated: use --"+name)
	_ = fs.MarkDeprecated(old, "use --"+name+" instead (--"+old+" will be removed in the next release)")
	_ = fs.SetAnnotation(old, replacementAnnotation, []string{name})
}
