CREATE TABLE IF NOT EXISTS usage_hourly (
  hour              INTEGER NOT NULL,
  key_id            TEXT NOT NULL,
  model             TEXT NOT NULL,
  backend           TEXT NOT NULL,
  requests          INTEGER NOT NULL DEFAULT 0,
  errors            INTEGER NOT NULL DEFAULT 0,
  prompt_tokens     INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens     INTEGER NOT NULL DEFAULT 0,
  estimated         INTEGER NOT NULL DEFAULT 0,
  cost_usd          REAL NOT NULL DEFAULT 0,
  -- latency histogram: usage.AppendHist encoding (8 buckets per doubling)
  latency           BLOB NOT NULL DEFAULT x'',
  PRIMARY KEY (hour, key_id, model, backend)
);


-- Backfill the totals of records written before rollups existed; their
-- latency histograms start empty (percentiles cover newer records).
INSERT INTO usage_hourly(hour, key_id, model, backend, requests, errors, prompt_tokens, completion_tokens, cached_tokens, estimated, cost_usd)
SELECT (ts/1000) - ((ts/1000) % 3600), key_id, model, backend, COUNT(*), SUM(status >= 400), SUM(prompt_tokens),
       SUM(completion_tokens), SUM(cached_tokens), SUM(estimated), SUM(cost_usd)
FROM usage GROUP BY 1, 2, 3, 4;
