-- Reconcile: overwrite one (shop, item, location)'s counters with values
-- computed elsewhere (SQL). ARGV: prefix, shop, item, location, available, held.
local p, shop, item, loc = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local k = shop .. '/' .. item .. '/' .. loc
redis.call('ZADD', p .. 'locs/' .. shop .. '/' .. item, 0, loc)
redis.call('SET', p .. 'avail/' .. k, ARGV[5])
redis.call('SET', p .. 'held/' .. k, ARGV[6])
return 1
