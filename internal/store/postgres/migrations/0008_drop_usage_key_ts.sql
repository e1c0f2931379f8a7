-- The index on (key_id, ts) served a key's usage over a time range before
-- the hourly rollups did: a key's summary now reads whole hours from
-- usage_hourly and raw rows only for the partial hours at the range's
-- edges, which the index on ts finds. Every ledger row paid for it.
DROP INDEX IF EXISTS usage_key_ts;
