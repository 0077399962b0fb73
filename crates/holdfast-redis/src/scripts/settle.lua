-- Claim (the Redis half), release, extend or expire one reservation. A hold
-- past its expiry is expired here instead of being claimed or extended.
--
-- ARGV: prefix, shop, id, op ('claim' | 'release' | 'extend' | 'expire'), ttl_ms
-- Returns {'res', id, key, status, expires_ms, lines_json, outcome} where
-- outcome is 'ok', 'same' (an idempotent repeat: nothing changed), 'expired' (the hold had expired; its units went back) or
-- 'wrong' (the status forbids op); or {'notfound'}.
local p, shop, id, op, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local rk = p .. 'res/' .. shop .. '/' .. id
local h = redis.call('HMGET', rk, 'key', 'status', 'expires', 'lines')
if not h[1] then return {'notfound'} end
local status, expires = h[2], tonumber(h[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function give_back(to_available)
  for _, a in ipairs(cjson.decode(h[4])) do
    local k = shop .. '/' .. a[1] .. '/' .. a[2]
    if to_available then redis.call('INCRBY', p .. 'avail/' .. k, a[3]) end
    redis.call('DECRBY', p .. 'held/' .. k, a[3])
  end
  redis.call('ZREM', p .. 'holds', shop .. '/' .. id)
end

local function out(outcome)
  return {'res', id, h[1], status, string.format('%d', expires), h[4], outcome}
end

if status ~= 'held' then
  -- Idempotent repeats answer the same; anything else is refused.
  if op == 'expire' then return out('wrong') end
  if (op == 'claim' and status == 'claimed') or (op == 'release' and (status == 'released' or status == 'expired')) then
    return out('same')
  end
  if status == 'expired' then return out('expired') end
  return out('wrong')
end

if op == 'release' then
  give_back(true); status = 'released'
elseif expires <= now or op == 'expire' then
  give_back(true); status = 'expired'
  redis.call('HSET', rk, 'status', status)
  if op == 'expire' then return out('ok') end
  return out('expired')
elseif op == 'claim' then
  -- The units leave Redis for good: the ledger in SQL counts them as committed.
  give_back(false); status = 'claimed'
elseif op == 'extend' then
  expires = now + ttl
  redis.call('HSET', rk, 'expires', string.format('%d', expires))
  redis.call('ZADD', p .. 'holds', expires, shop .. '/' .. id)
  return out('ok')
end
redis.call('HSET', rk, 'status', status)
return out('ok')
