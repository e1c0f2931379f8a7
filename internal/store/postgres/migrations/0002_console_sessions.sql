-- Web console sign-ins, shared by every replica. id_hash is the SHA-256 of
-- the cookie value (never the cookie itself); no key secret is stored.
CREATE TABLE IF NOT EXISTS console_sessions (
  id_hash    TEXT PRIMARY KEY,
  csrf       TEXT NOT NULL,
  master     INTEGER NOT NULL DEFAULT 0,
  key_id     TEXT NOT NULL DEFAULT '',
  key_hash   TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_key ON console_sessions(key_id, master, created_at);
CREATE INDEX IF NOT EXISTS console_sessions_expiry ON console_sessions(expires_at);
