-- Ledger ids are now made by the server (usage.NewID: unguessable, unique
-- per request); the client's X-Request-Id moves to its own column, which
-- is neither unique nor trusted. Existing rows keep their id. Their
-- client_request_id is that id, except where the id has the shape the
-- gateway used to make up for clients that sent none ('req_', 8 hex
-- digits, '_', a base-36 counter): those clients sent nothing, so it stays
-- ''. usage.LegacyClientRequestID applies the same rule to old spool files.
-- The UPDATE rewrites every existing row once; on a large ledger this
-- migration takes a while (replicas wait on the migration lock meanwhile).
ALTER TABLE usage ADD COLUMN IF NOT EXISTS client_request_id TEXT NOT NULL DEFAULT '';
UPDATE usage SET client_request_id = id WHERE id !~ '^req_[0-9a-f]{8}_[0-9a-z]+$';
-- Partial: rows without a client id (most clients send none) cost no
-- index write. Lookups name a non-empty id (sqlstore.ByClientRequestID).
CREATE INDEX IF NOT EXISTS usage_client_request_id ON usage(client_request_id) WHERE client_request_id <> '';
