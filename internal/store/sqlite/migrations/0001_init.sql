CREATE TABLE IF NOT EXISTS settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS versions (
  name TEXT PRIMARY KEY,
  v    INTEGER NOT NULL
);
INSERT OR IGNORE INTO versions(name, v) VALUES ('keys', 0);

CREATE TABLE IF NOT EXISTS api_keys (
  id            TEXT PRIMARY KEY,
  name          TEXT NOT NULL DEFAULT '',
  owner         TEXT NOT NULL DEFAULT '',
  hash          TEXT NOT NULL UNIQUE,
  hint          TEXT NOT NULL DEFAULT '',
  models        TEXT NOT NULL DEFAULT '[]',
  rpm           INTEGER NOT NULL DEFAULT 0,
  tpm           INTEGER NOT NULL DEFAULT 0,
  max_conc      INTEGER NOT NULL DEFAULT 0,
  budget_usd    REAL NOT NULL DEFAULT 0,
  budget_period TEXT NOT NULL DEFAULT '',
  metadata      TEXT NOT NULL DEFAULT '{}',
  created_at    INTEGER NOT NULL,
  expires_at    INTEGER,
  revoked_at    INTEGER
);

CREATE TABLE IF NOT EXISTS usage (
  id                TEXT PRIMARY KEY,
  ts                INTEGER NOT NULL,
  key_id            TEXT NOT NULL,
  model             TEXT NOT NULL,
  backend           TEXT NOT NULL DEFAULT '',
  upstream_model    TEXT NOT NULL DEFAULT '',
  endpoint          TEXT NOT NULL DEFAULT '',
  status            INTEGER NOT NULL,
  error_type        TEXT NOT NULL DEFAULT '',
  prompt_tokens     INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens     INTEGER NOT NULL DEFAULT 0,
  ttft_us           INTEGER NOT NULL DEFAULT 0,
  latency_us        INTEGER NOT NULL DEFAULT 0,
  estimated         INTEGER NOT NULL DEFAULT 0,
  stream            INTEGER NOT NULL DEFAULT 0,
  cost_usd          REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS usage_ts ON usage(ts);
CREATE INDEX IF NOT EXISTS usage_key_ts ON usage(key_id, ts);
