-- A key's priority weighs its turns in a deployment's fair queue (0: the
-- default weight, 1). A step of its own, so that other key columns added
-- beside it migrate independently.
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
