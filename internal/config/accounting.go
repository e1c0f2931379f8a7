package config

import (
	"path/filepath"
	"strings"
	"time"

	"llmgate/internal/redact"
)

func (c *Config) noteLine(key string, line int) {
	if c.lines == nil {
		c.lines = map[string]int{}
	}
	c.lines[key] = line
}

// Line returns the line of a top-level key in the file, or 0.
func (c *Config) Line(key string) int { return c.lines[key] }

// validateAccounting checks the settings of limits, prices, Redis, the
// usage spool and retention.
func (c *Config) validateAccounting() error {
	le := func(line int, key, msg string) error {
		return &LineError{Source: c.Source, Line: line, Key: key, Msg: msg}
	}
	if c.Redis != "" && !strings.HasPrefix(c.Redis, "redis://") && !strings.HasPrefix(c.Redis, "rediss://") {
		return le(c.Line("redis"), "redis", "must be a URL like redis://127.0.0.1:6379/0, not "+quote(redact.Secrets(c.Redis)))
	}
	if c.RedisReplicas < 0 {
		return le(c.Line("redis_replicas"), "redis_replicas", "must be the number of replicas sharing Redis, or 0 to count them through Redis")
	}
	if c.Retention < 0 || (c.Retention > 0 && time.Duration(c.Retention) < time.Hour) {
		return le(c.Line("retention"), "retention", "must be at least 1h (for example 90d), or 0 to keep every record")
	}
	for _, name := range sortedKeys(c.Models) {
		m := c.Models[name]
		if m == nil {
			continue
		}
		key := "models." + name
		for _, f := range []struct {
			k string
			v float64
		}{{"input_price", m.InputPrice}, {"output_price", m.OutputPrice}, {"cached_input_price", m.CachedInputPrice},
			{"rpm", float64(m.RPM)}, {"tpm", float64(m.TPM)}, {"max_concurrency", float64(m.MaxConcurrency)}} {
			if f.v < 0 {
				return le(m.line, key+"."+f.k, "must not be negative (prices are USD per 1M tokens; 0 = free or unlimited)")
			}
		}
	}
	return nil
}

// Spool returns the usage spool directory: spool_dir, else one named after
// the SQLite database file (llmgate.db -> llmgate.db.spool, beside it), so
// that gateways on different files in one folder never share one, else
// ./llmgate-spool.
func (c *Config) Spool() string {
	if c.SpoolDir != "" {
		return c.SpoolDir
	}
	if c.sqliteFile() {
		return c.Database + ".spool"
	}
	return "llmgate-spool"
}

// LegacySpool returns the spool directory earlier versions used by default
// for this config (llmgate-spool beside the SQLite file), whose unsent
// records a gateway takes over; "" when spool_dir is set or the database
// is not a SQLite file.
func (c *Config) LegacySpool() string {
	if c.SpoolDir != "" || !c.sqliteFile() {
		return ""
	}
	return filepath.Join(filepath.Dir(c.Database), "llmgate-spool")
}

// sqliteFile reports whether the database is a SQLite file.
func (c *Config) sqliteFile() bool {
	return c.Database != "" && !strings.Contains(c.Database, "://") && c.Database != ":memory:"
}

// CostUSD prices a request on a model: prompt tokens (cached ones at the
// cached price) and completion tokens, with prices per 1M tokens.
func (m *Model) CostUSD(prompt, cached, completion int) float64 {
	if m == nil {
		return 0
	}
	cachedPrice := m.CachedInputPrice
	if cachedPrice == 0 {
		cachedPrice = m.InputPrice
	}
	cached = min(cached, prompt)
	return (float64(prompt-cached)*m.InputPrice + float64(cached)*cachedPrice + float64(completion)*m.OutputPrice) / 1e6
}

func quote(s string) string { return "\"" + s + "\"" }
