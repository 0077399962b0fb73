-- Moves a counter by a delta: the Redis half of a stock change. A decrease
-- is guarded: it never takes units that are held or sold.
-- ARGV: prefix, shop, item, location, delta. Returns {1, available} or {0, available}.
local p, shop, item, loc, delta = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local k = p .. 'avail/' .. shop .. '/' .. item .. '/' .. loc
local have = tonumber(redis.call('GET', k) or '0')
if delta < 0 and have + delta < 0 then return {0, have} end
redis.call('ZADD', p .. 'locs/' .. shop .. '/' .. item, 0, loc)
return {1, redis.call('INCRBY', k, delta)}
