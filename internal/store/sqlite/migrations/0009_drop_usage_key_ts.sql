-- The index on (key_id, ts) served a key's usage over a time range before
-- the hourly rollups did: a key's summary now reads whole hours from
-- usage_hourly and raw rows only for the partial hours at the range's
-- edges, which the index on ts finds. Keeping it cost every ledger row a
-- fourth B-tree insert (about a fifth of the row's CPU).
DROP INDEX IF EXISTS usage_key_ts;
