CREATE TABLE IF NOT EXISTS settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS versions (
  name TEXT PRIMARY KEY,
  v    BIGINT NOT NULL
);
INSERT INTO versions(name, v) VALUES ('keys', 0) ON CONFLICT (name) DO NOTHING;

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
  budget_usd    DOUBLE PRECISION NOT NULL DEFAULT 0,
  budget_period TEXT NOT NULL DEFAULT '',
  metadata      TEXT NOT NULL DEFAULT '{}',
  created_at    BIGINT NOT NULL,
  expires_at    BIGINT,
  revoked_at    BIGINT
);

CREATE TABLE IF NOT EXISTS usage (
  id                TEXT PRIMARY KEY,
  ts                BIGINT NOT NULL,
  key_id            TEXT NOT NULL,
  model             TEXT NOT NULL,
  backend           TEXT NOT NULL DEFAULT '',
  upstream_model    TEXT NOT NULL DEFAULT '',
  endpoint          TEXT NOT NULL DEFAULT '',
  status            INTEGER NOT NULL,
  error_type        TEXT NOT NULL DEFAULT '',
  prompt_tokens     BIGINT NOT NULL DEFAULT 0,
  completion_tokens BIGINT NOT NULL DEFAULT 0,
  cached_tokens     BIGINT NOT NULL DEFAULT 0,
  ttft_us           BIGINT NOT NULL DEFAULT 0,
  latency_us        BIGINT NOT NULL DEFAULT 0,
  estimated         INTEGER NOT NULL DEFAULT 0,
  stream            INTEGER NOT NULL DEFAULT 0,
  cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS usage_ts ON usage(ts);
CREATE INDEX IF NOT EXISTS usage_key_ts ON usage(key_id, ts);

CREATE TABLE IF NOT EXISTS usage_hourly (
  hour              BIGINT NOT NULL,
  key_id            TEXT NOT NULL,
  model             TEXT NOT NULL,
  backend           TEXT NOT NULL,
  requests          BIGINT NOT NULL DEFAULT 0,
  errors            BIGINT NOT NULL DEFAULT 0,
  prompt_tokens     BIGINT NOT NULL DEFAULT 0,
  completion_tokens BIGINT NOT NULL DEFAULT 0,
  cached_tokens     BIGINT NOT NULL DEFAULT 0,
  estimated         BIGINT NOT NULL DEFAULT 0,
  cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0,
  -- latency histogram: usage.AppendHist encoding (8 buckets per doubling)
  latency           BYTEA NOT NULL DEFAULT ''::bytea,
  PRIMARY KEY (hour, key_id, model, backend)
);

