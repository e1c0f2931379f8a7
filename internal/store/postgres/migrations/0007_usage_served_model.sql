-- The fallback model that served a request when the requested model's own
-- deployments did not ('' when the requested model served, and in rows
-- written before this column).
ALTER TABLE usage ADD COLUMN IF NOT EXISTS served_model TEXT NOT NULL DEFAULT '';
-- A constant default: PostgreSQL adds the column without rewriting the table.
