-- One sweep: the members of the holds set past their expiry, at most
-- ARGV[2] of them. ARGV: prefix, limit. Returns the members ("shop/id"); the
-- caller expires each with settle.lua, which re-checks the status atomically,
-- so two sweepers never give the same hold back twice.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', ARGV[1] .. 'holds', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
