package limit

import "github.com/redis/go-redis/v9"

// The Redis limiter's Lua scripts. Each runs atomically on the Redis
// server, on its clock (TIME). Budget counters are hashes: "s" settled
// spend, "r:<replica>" a replica's reservations in flight, "u:<replica>"
// costs a replica settled that Redis could not count and the ledger may not
// have yet; the spend a budget is enforced against is their sum.
//
// Lua numbers are doubles, so sums and comparisons in the scripts never
// wrap (beyond 2^53 nano-USD, $9 million, they round to a few millionths
// of a dollar). Counters are Redis integers, whose HINCRBY refuses to go
// past the int64 range with an error that would abort a script half-way:
// satIncr stops them at the end of the range instead.

// satIncrLua defines satIncr(key, field, v): HINCRBY that saturates at the
// int64 range instead of failing; it returns the new value.
const satIncrLua = `
local function satIncr(k, f, v)
  local r = redis.pcall('HINCRBY', k, f, v)
  if type(r) == 'table' and r.err then
    if string.sub(v, 1, 1) == '-' then r = '-9223372036854775808' else r = '9223372036854775807' end
    redis.call('HSET', k, f, r)
    r = tonumber(r)
  end
  return r
end
`

// acquireScript checks every scope, then takes from all of them, or
// nothing. Bucket levels are stored with the millisecond they refer to. A
// replica whose epoch is not Redis's (Redis restarted, or lost the marker)
// is told so ({-1}) and takes nothing until it has re-seeded.
var acquireScript = redis.NewScript(satIncrLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tokens = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local member = ARGV[4]
local lease = tonumber(ARGV[5])
local rf = ARGV[6]
local n = (#KEYS - 1) / 3
local rl, tl, sp = {}, {}, {}
local oth = {}
for i = 1, n do rl[i], tl[i], sp[i], oth[i] = 0, 0, -1, 0 end
local res = {1, 0, 0, 0, now}
for i = 1, n do
  local a = 6 + (i - 1) * 5
  local rpm, tpm, mc, budget = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  local rk, ck, bk = KEYS[(i-1)*3+2], KEYS[(i-1)*3+3], KEYS[(i-1)*3+4]
  if rpm > 0 or tpm > 0 then
    local h = redis.call('HMGET', rk, 'r', 'rt', 't', 'tt', 'rl', 'tl')
    -- A raised limit adds its extra capacity at once; a lowered one caps.
    if rpm > 0 then
      rl[i] = rpm
      if h[1] then
        local up = math.max(0, rpm - tonumber(h[5] or rpm))
        rl[i] = math.min(rpm, tonumber(h[1]) + up + math.max(0, now - tonumber(h[2])) * rpm / 60000)
      end
    end
    if tpm > 0 then
      tl[i] = tpm
      if h[3] then
        local up = math.max(0, tpm - tonumber(h[6] or tpm))
        tl[i] = math.min(tpm, tonumber(h[3]) + up + math.max(0, now - tonumber(h[4])) * tpm / 60000)
      end
    end
  end
  local code = 0
  if mc > 0 then
    redis.call('ZREMRANGEBYSCORE', ck, '-inf', now)
    if redis.call('ZCARD', ck) >= mc then code = 1 end
  end
  if code == 0 and rpm > 0 and rl[i] < 1 then code = 2 end
  if code == 0 and tpm > 0 and tl[i] < math.min(tokens, tpm) then code = 3 end
  if budget > 0 then
    -- Spend is settled ("s") plus every replica's reservations ("r:...").
    -- Other replicas' reservations ("r:" but not ours) are returned too.
    local spent, h = 0, redis.call('HGETALL', bk)
    for j = 1, #h, 2 do
      local v = tonumber(h[j + 1])
      spent = spent + v
      if h[j] ~= rf and string.sub(h[j], 1, 2) == 'r:' then oth[i] = oth[i] + v end
    end
    sp[i] = spent
    if code == 0 and spent + cost > budget then code = 4 end
  end
  if code ~= 0 then
    -- A string: Redis would convert a number beyond int64 to a negative one.
    res = {0, i, code, string.format('%.0f', math.max(sp[i], 0)), now}
    break
  end
end
if res[1] == 1 then
  for i = 1, n do
    local a = 6 + (i - 1) * 5
    local rpm, tpm, mc, budget, ttl = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
    local rk, ck, bk = KEYS[(i-1)*3+2], KEYS[(i-1)*3+3], KEYS[(i-1)*3+4]
    local ns = string.format('%.0f', now)
    if rpm > 0 then
      rl[i] = rl[i] - 1
      redis.call('HSET', rk, 'r', string.format('%.6f', rl[i]), 'rt', ns, 'rl', rpm)
    end
    if tpm > 0 then
      tl[i] = tl[i] - tokens
      redis.call('HSET', rk, 't', string.format('%.6f', tl[i]), 'tt', ns, 'tl', tpm)
    end
    if rpm > 0 or tpm > 0 then redis.call('PEXPIRE', rk, 600000) end
    if mc > 0 then
      redis.call('ZADD', ck, string.format('%.0f', now + lease), member)
      redis.call('PEXPIRE', ck, lease * 2)
    end
    if budget > 0 then
      if cost > 0 then satIncr(bk, rf, ARGV[3]) end
      sp[i] = sp[i] + cost
      if ttl > 0 then redis.call('EXPIRE', bk, ttl) end
    end
  end
end
for i = 1, n do
  res[#res + 1] = string.format('%.6f', rl[i])
  res[#res + 1] = string.format('%.6f', tl[i])
  res[#res + 1] = string.format('%.0f', sp[i])
  res[#res + 1] = string.format('%.0f', oth[i])
end
return res
`)

// releaseScript frees the lease's slots, corrects the token bucket, adds
// the actual cost to settled spend and drops the reservation from this
// replica's field; it returns Redis's time and each budget's spend after
// that. A stale epoch changes nothing ({-1}): the caller keeps the cost for
// its resync.
var releaseScript = redis.NewScript(satIncrLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local res = {1, now}
local dtok = tonumber(ARGV[2])
local actual = tonumber(ARGV[3])
local reserved = tonumber(ARGV[4])
local member = ARGV[5]
local rf = ARGV[6]
local n = (#KEYS - 1) / 3
for i = 1, n do
  local a = 6 + (i - 1) * 4
  local tpm, mc, budget, ttl = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4])
  local rk, ck, bk = KEYS[(i-1)*3+2], KEYS[(i-1)*3+3], KEYS[(i-1)*3+4]
  if mc > 0 then redis.call('ZREM', ck, member) end
  if tpm > 0 and dtok ~= 0 then
    local cur = redis.call('HGET', rk, 't')
    if cur then redis.call('HSET', rk, 't', string.format('%.6f', math.min(tpm, tonumber(cur) - dtok))) end
  end
  if budget > 0 then
    if actual ~= 0 then satIncr(bk, 's', ARGV[3]) end
    if reserved ~= 0 then
      if satIncr(bk, rf, '-' .. ARGV[4]) <= 0 then redis.call('HDEL', bk, rf) end
    end
    if ttl > 0 and redis.call('EXISTS', bk) == 1 then redis.call('EXPIRE', bk, ttl) end
    local spent, oth, h = 0, 0, redis.call('HGETALL', bk)
    for j = 1, #h, 2 do
      local v = tonumber(h[j + 1])
      spent = spent + v
      if h[j] ~= rf and string.sub(h[j], 1, 2) == 'r:' then oth = oth + v end
    end
    res[#res + 1] = string.format('%.0f', spent)
    res[#res + 1] = string.format('%.0f', oth)
  else
    res[#res + 1] = '-1'
    res[#res + 1] = '0'
  end
end
return res
`)

var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = string.format('%.0f', now + tonumber(ARGV[1]))
-- ARGV[2]: 'add' puts leases back after Redis lost them; 'xx' only renews.
for i = 1, #KEYS do
  if ARGV[2] == 'add' then
    redis.call('ZADD', KEYS[i], exp, ARGV[i + 2])
  else
    redis.call('ZADD', KEYS[i], 'XX', exp, ARGV[i + 2])
  end
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)
end
return 1
`)

// seedScript raises settled spend to the ledger's figure when that is
// larger and, at a resync (ARGV[7] = '1'), sets this replica's fields:
// its reservations in flight and the costs it settled that Redis did not
// count and the ledger may not have yet. It drops the fields of replicas
// that stopped announcing themselves (crashed with requests in flight),
// whose records reach the ledger when their spool is replayed.
var seedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local bk, live = KEYS[2], KEYS[3]
local ledger, rf, rme, uf, ume, assert, ttl = tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local s = tonumber(redis.call('HGET', bk, 's') or '0')
if ledger > s then s = ledger end
-- A saturated counter reads as 2^63 in a double: it is written back as the largest int64.
local sf = string.format('%.0f', s)
if s >= 9223372036854775807 then sf = '9223372036854775807' end
redis.call('HSET', bk, 's', sf)
if assert == '1' then
  if tonumber(rme) > 0 then redis.call('HSET', bk, rf, rme) else redis.call('HDEL', bk, rf) end
  if tonumber(ume) > 0 then redis.call('HSET', bk, uf, ume) else redis.call('HDEL', bk, uf) end
end
for _, f in ipairs(redis.call('HKEYS', bk)) do
  local kind = string.sub(f, 1, 2)
  if (kind == 'r:' or kind == 'u:') and f ~= rf and f ~= uf and not redis.call('ZSCORE', live, string.sub(f, 3)) then
    redis.call('HDEL', bk, f)
  end
end
if ttl > 0 then redis.call('EXPIRE', bk, ttl) end
return s
`)
