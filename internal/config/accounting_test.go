package config

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfig_AccountingSettingsLoad(t *testing.T) {
	src := `
redis: redis://127.0.0.1:6379/0
redis_fail_open: true
redis_replicas: 3
retention: 90d
spool_dir: /tmp/spool
spool_fsync: true
backends:
  b: {url: http://127.0.0.1:8000}
models:
  m: {backend: b, input_price: 0.5, output_price: 1.5, cached_input_price: 0.1, rpm: 600, tpm: 100000, max_concurrency: 8}
`
	cfg, err := Load(strings.NewReader(src), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models["m"]
	if cfg.Redis != "redis://127.0.0.1:6379/0" || !cfg.RedisFailOpen || cfg.RedisReplicas != 3 || time.Duration(cfg.Retention) != 90*24*time.Hour || cfg.Spool() != "/tmp/spool" || !cfg.SpoolFsync ||
		m.RPM != 600 || m.TPM != 100000 || m.MaxConcurrency != 8 {
		t.Fatalf("settings not loaded: %+v %+v", cfg, m)
	}
	// 1000 prompt tokens of which 400 cached, 2000 completion tokens.
	want := (600*0.5 + 400*0.1 + 2000*1.5) / 1e6
	if got := m.CostUSD(1000, 400, 2000); math.Abs(got-want) > 1e-12 {
		t.Fatalf("cost = %g, want %g", got, want)
	}
}

func TestConfig_AccountingErrorsNameTheLine(t *testing.T) {
	cases := []struct{ src, want string }{
		{"listen: 127.0.0.1:1\nredis: 127.0.0.1:6379\n", "c.yaml:2: redis: must be a URL like redis://"},
		// A URL of another scheme is quoted without its password.
		{"redis: http://:s3cret@cache:6379/0\n", `not "http://:xxxxx@cache:6379/0"`},
		{"retention: 5m\n", "c.yaml:1: retention: must be at least 1h"},
		{"redis_replicas: -2\n", "c.yaml:1: redis_replicas: must be the number of replicas"},
		{"backends:\n  b: {url: http://x:1}\nmodels:\n  m: {backend: b, output_price: -1}\n", "c.yaml:4: models.m.output_price: must not be negative"},
		{"rediss: redis://x\n", `unknown key "rediss"; did you mean "redis"?`},
		{"backends:\n  b: {url: http://x:1}\nmodels:\n  m: {backend: b, rpn: 5}\n", `did you mean "rpm"?`},
	}
	for _, c := range cases {
		_, err := Load(strings.NewReader(c.src), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want it to contain %q", c.src, err, c.want)
		}
	}
}

// The default spool is named after the SQLite file, so gateways on two
// files in one folder have their own; the old shared default is the one to
// take records over from.
func TestConfig_SpoolDefaultsToTheSQLiteFilesName(t *testing.T) {
	for _, c := range []struct{ db, dir, spool, spoolDir, legacy string }{
		{"/var/lib/llmgate/llmgate.db", "", "/var/lib/llmgate/llmgate.db.spool", "", "/var/lib/llmgate/llmgate-spool"},
		{"/var/lib/llmgate/team-b.db", "", "/var/lib/llmgate/team-b.db.spool", "", "/var/lib/llmgate/llmgate-spool"},
		{"llmgate.db", "", "llmgate.db.spool", "", "llmgate-spool"},
		{"/var/lib/llmgate/llmgate.db", "/srv/spool", "/srv/spool", "/srv/spool", ""},
		{"postgres://db/x", "", "llmgate-spool", "", ""},
		{":memory:", "", "llmgate-spool", "", ""},
	} {
		cfg := &Config{Database: c.db, SpoolDir: c.spoolDir}
		if got, legacy := cfg.Spool(), cfg.LegacySpool(); got != c.spool || legacy != c.legacy {
			t.Errorf("database %q, spool_dir %q: spool %q, legacy %q; want %q and %q", c.db, c.spoolDir, got, legacy, c.spool, c.legacy)
		}
	}
}

func TestConfig_MetricsKeyLabelsSwitchAndItsEnvironmentOverride(t *testing.T) {
	cfg, err := Load(strings.NewReader("metrics_key_labels: false\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsKeyLabelsOn() {
		t.Fatal("metrics_key_labels: false left key labels on")
	}
	env := map[string]string{"LLMGATE_METRICS_KEY_LABELS": "on"}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if !cfg.MetricsKeyLabelsOn() {
		t.Fatal("LLMGATE_METRICS_KEY_LABELS=on did not override the file")
	}
	if !(&Config{}).MetricsKeyLabelsOn() {
		t.Fatal("key labels must default to on")
	}
}
