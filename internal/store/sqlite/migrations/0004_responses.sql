-- Responses API responses kept for previous_response_id and
-- GET /v1/responses/{id}; only the key that created one can use it.
-- input and output are JSON arrays of items; body is the response object.
CREATE TABLE IF NOT EXISTS responses (
  id          TEXT PRIMARY KEY,
  key_id      TEXT NOT NULL,
  model       TEXT NOT NULL DEFAULT '',
  previous_id TEXT NOT NULL DEFAULT '',
  input       TEXT NOT NULL,
  output      TEXT NOT NULL,
  body        TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_expiry ON responses(expires_at);
