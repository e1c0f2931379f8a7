package policy

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/router"
	"llmgate/internal/usage"
)

// table serves team-a-chat, team-a-embed and team-b-chat from one backend.
func table(t *testing.T) *router.Table {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(`
backends:
  b: {url: http://127.0.0.1:1}
models:
  team-a-chat: {backend: b}
  team-a-embed: {backend: b}
  team-b-chat: {backend: b}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tb := router.New(cfg)
	t.Cleanup(tb.Close)
	return tb
}

func TestResolve_AppliesTheKeysAllowList(t *testing.T) {
	tb := table(t)
	master := keys.Principal{Master: true}
	open := keys.Principal{Key: &keys.Key{Name: "open"}}
	teamA := keys.Principal{Key: &keys.Key{Name: "team-a", Models: []string{"team-a-*"}}}
	for _, tc := range []struct {
		name   string
		p      keys.Principal
		model  string
		status int      // 0: resolved
		has    []string // in the refusal's message
		hasNot []string
	}{
		{"master takes any model", master, "team-b-chat", 0, nil, nil},
		{"a key without list takes any model", open, "team-b-chat", 0, nil, nil},
		{"a listed model by glob", teamA, "team-a-embed", 0, nil, nil},
		{"a served model outside the list", teamA, "team-b-chat", http.StatusForbidden,
			[]string{`API key "team-a" may not use model "team-b-chat"`, "team-a-*"}, nil},
		{"an unknown model, for a key with a list: only its models are suggested", teamA, "team-b-chta", http.StatusNotFound,
			[]string{`"team-b-chta"`, "team-a-chat"}, []string{"team-b-chat"}},
		{"an unknown model, for the master key: every model", master, "team-b-chta", http.StatusNotFound,
			[]string{`did you mean "team-b-chat"?`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Resolve(tb, tc.p, tc.model)
			if tc.status == 0 {
				if err != nil || r == nil {
					t.Fatalf("Resolve = %v, %v; want the route", r, err)
				}
				return
			}
			var ae *apierror.Error
			if !errors.As(err, &ae) || ae.Status != tc.status || r != nil {
				t.Fatalf("Resolve = %v, %v; want a %d", r, err, tc.status)
			}
			for _, s := range tc.has {
				if !strings.Contains(ae.Message, s) {
					t.Errorf("message %q lacks %q", ae.Message, s)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(ae.Message, s) {
					t.Errorf("message %q names %q, which the key may not see", ae.Message, s)
				}
			}
		})
	}
}

func TestNotAllowed_IsAPermissionError(t *testing.T) {
	e := NotAllowed(keys.Principal{Key: &keys.Key{Name: "k", Models: []string{"a", "b*"}}}, "c")
	if e.Status != http.StatusForbidden || e.Kind != apierror.KindPermission || e.Code != "model_not_allowed" {
		t.Fatalf("NotAllowed = %+v", e)
	}
	if want := `API key "k" may not use model "c"; it may use: a, b*`; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
}

func TestObserverFunc_CallsTheFunction(t *testing.T) {
	var got []string
	var o Observer = ObserverFunc(func(r usage.Record) { got = append(got, r.Model) })
	o.Observe(usage.Record{Model: "m1"})
	o.Observe(usage.Record{Model: "m2"})
	if strings.Join(got, ",") != "m1,m2" {
		t.Fatalf("observed %v", got)
	}
}
