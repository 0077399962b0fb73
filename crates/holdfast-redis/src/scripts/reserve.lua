-- Reserve: the legacy counter model's guarded decrement, for a whole cart at
-- once. Redis runs a script atomically, so "check every line, then decrement
-- every line" cannot interleave with another buyer: a counter never goes
-- below zero and a multi-line cart is all or nothing.
--
-- ARGV: prefix, shop, key, fingerprint, ttl_ms, allow_partial, allow_split,
--       id_base, nlines, then per line: item, quantity, ncand, cand_1..cand_n
--       (ncand = 0: every location of the item, in byte order).
-- Returns {'res', id, key, status, expires_ms, lines_json, created} or
--         {'conflict'} or {'short', available_1, ..., available_n}.
local p, shop, key, fp = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, partial, split = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7] == '1'
local base, nlines = tonumber(ARGV[8]), tonumber(ARGV[9])

local function res_key(id) return p .. 'res/' .. shop .. '/' .. id end
local function record(id, created)
  local h = redis.call('HMGET', res_key(id), 'key', 'status', 'expires', 'lines')
  return {'res', id, h[1], h[2], h[3], h[4], created}
end

local existing = redis.call('GET', p .. 'key/' .. shop .. '/' .. key)
if existing then
  if redis.call('HGET', res_key(existing), 'fp') ~= fp then return {'conflict'} end
  return record(existing, '0')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local i = 10
local takes, shortfalls, short = {}, {}, false
for l = 1, nlines do
  local item, want, ncand = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  local cands = {}
  if ncand == 0 then
    cands = redis.call('ZRANGE', p .. 'locs/' .. shop .. '/' .. item, 0, -1)
  else
    for c = 1, ncand do cands[c] = ARGV[i + c - 1] end
    i = i + ncand
  end
  local line, best, total = {}, 0, 0
  for _, loc in ipairs(cands) do
    local have = tonumber(redis.call('GET', p .. 'avail/' .. shop .. '/' .. item .. '/' .. loc) or '0')
    if have < 0 then have = 0 end
    total = total + have
    if have > best then best = have end
  end
  local reach = split and total or best
  shortfalls[l] = tostring(math.min(reach, want))
  local need = want
  if reach < want then
    short = true
    if not partial then need = 0 else need = reach end
  end
  -- Fill from the first candidate that can fill the line (or, split, from
  -- each candidate in order).
  for _, loc in ipairs(cands) do
    if need == 0 then break end
    local have = tonumber(redis.call('GET', p .. 'avail/' .. shop .. '/' .. item .. '/' .. loc) or '0')
    if split then
      local n = math.min(have, need)
      if n > 0 then line[#line + 1] = {item, loc, n}; need = need - n end
    elseif have >= need then
      line[#line + 1] = {item, loc, need}; need = 0
    end
  end
  for _, a in ipairs(line) do takes[#takes + 1] = a end
end

if (short and not partial) or #takes == 0 then
  local out = {'short'}
  for l = 1, nlines do out[l + 1] = shortfalls[l] end
  return out
end

for _, a in ipairs(takes) do
  local k = shop .. '/' .. a[1] .. '/' .. a[2]
  redis.call('DECRBY', p .. 'avail/' .. k, a[3])
  redis.call('INCRBY', p .. 'held/' .. k, a[3])
end
-- Strings, not Lua numbers: Redis would print a number as %.14g (1e+15).
local id = string.format('%d', base + redis.call('INCR', p .. 'seq'))
local expires = string.format('%d', now + ttl)
redis.call('HSET', res_key(id), 'key', key, 'fp', fp, 'status', 'held', 'expires', expires,
  'lines', cjson.encode(takes))
redis.call('SET', p .. 'key/' .. shop .. '/' .. key, id)
redis.call('ZADD', p .. 'holds', expires, shop .. '/' .. id)
return record(id, '1')
