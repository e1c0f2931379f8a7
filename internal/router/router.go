// Package router maps public model names to the deployments that serve them.
package router

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/provider"
)

// Deployment is one place a public model is served: a backend and the model
// name that backend knows it by.
type Deployment struct {
	Backend       *provider.Backend
	UpstreamModel string
}

// Route is a public model and its deployments.
type Route struct {
	Model       string
	Deployments []Deployment
}

// Table is an immutable routing table built from one configuration. A config
// reload builds a new Table and swaps it atomically.
type Table struct {
	routes   map[string]*Route
	names    []string
	backends map[string]*provider.Backend
}

// New builds a table from a validated configuration.
func New(cfg *config.Config) *Table {
	t := &Table{routes: map[string]*Route{}, backends: map[string]*provider.Backend{}}
	for name, b := range cfg.Backends {
		t.backends[name] = provider.NewBackend(b)
	}
	for name, m := range cfg.Models {
		t.routes[name] = &Route{Model: name, Deployments: []Deployment{{Backend: t.backends[m.Backend], UpstreamModel: m.UpstreamModel}}}
		t.names = append(t.names, name)
	}
	sort.Strings(t.names)
	return t
}

// Models returns the public model names, sorted.
func (t *Table) Models() []string { return t.names }

// Route returns the route for a public model. An unknown model yields a 404
// that lists what is available and the nearest name.
func (t *Table) Route(model string) (*Route, error) {
	if r, ok := t.routes[model]; ok {
		return r, nil
	}
	return nil, t.notFound(model)
}

// Backend returns a backend by name.
func (t *Table) Backend(name string) *provider.Backend { return t.backends[name] }

// Close releases the table's connections.
func (t *Table) Close() {
	for _, b := range t.backends {
		b.Close()
	}
}

func (t *Table) notFound(model string) error {
	var msg strings.Builder
	if model == "" {
		msg.WriteString(`the request has no "model" field; `)
	} else {
		fmt.Fprintf(&msg, "model %q is not served by this gateway", model)
		if near := config.Nearest(model, t.names); near != "" {
			fmt.Fprintf(&msg, "; did you mean %q?", near)
		}
		msg.WriteString(" ")
	}
	switch {
	case len(t.names) == 0:
		msg.WriteString("no models are configured: add a backend and models to the config file (see llmgate serve --help)")
	case len(t.names) <= 20:
		fmt.Fprintf(&msg, "available models: %s", strings.Join(t.names, ", "))
	default:
		fmt.Fprintf(&msg, "available models include: %s, … (GET /v1/models lists all %d)", strings.Join(t.names[:20], ", "), len(t.names))
	}
	status, code := http.StatusNotFound, "model_not_found"
	if model == "" {
		status, code = http.StatusBadRequest, "missing_model"
	}
	e := apierror.New(status, apierror.KindNotFound, code, msg.String())
	if model == "" {
		e.Kind = apierror.KindInvalidRequest
		e.Param = "model"
	}
	return e
}

// Attempt sends the request to one deployment. committed reports whether
// anything reached the client (after which no retry is possible); err is
// the failure, an *apierror.Error when it should reach the client as is.
type Attempt func(ctx context.Context, dep Deployment) (committed bool, err error)

// Forward runs attempt against the route's deployments. This version tries
// the first deployment only; retries, fallbacks and health decide here.
func (t *Table) Forward(ctx context.Context, route *Route, attempt Attempt) error {
	_, err := attempt(ctx, route.Deployments[0])
	return err
}
