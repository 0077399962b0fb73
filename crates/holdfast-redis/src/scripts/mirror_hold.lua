-- sql-primary: SQL decided and committed a hold; make Redis count it too, so
-- that Redis is current when the kill switch sends the shop back. The
-- decrement is not guarded: SQL already decided. A counter that goes below
-- zero means Redis had drifted; the caller counts it.
-- ARGV: prefix, shop, id, key, fingerprint, expires_ms, lines_json.
-- Returns the number of counters that went below zero, or -1 if the id exists.
local p, shop, id, key, fp, expires, lines = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local rk = p .. 'res/' .. shop .. '/' .. id
if redis.call('EXISTS', rk) == 1 then return -1 end
local negative = 0
for _, a in ipairs(cjson.decode(lines)) do
  local k = shop .. '/' .. a[1] .. '/' .. a[2]
  redis.call('ZADD', p .. 'locs/' .. shop .. '/' .. a[1], 0, a[2])
  if redis.call('DECRBY', p .. 'avail/' .. k, a[3]) < 0 then negative = negative + 1 end
  redis.call('INCRBY', p .. 'held/' .. k, a[3])
end
redis.call('HSET', rk, 'key', key, 'fp', fp, 'status', 'held', 'expires', expires, 'lines', lines)
redis.call('SET', p .. 'key/' .. shop .. '/' .. key, id, 'NX')
redis.call('ZADD', p .. 'holds', expires, shop .. '/' .. id)
return negative
