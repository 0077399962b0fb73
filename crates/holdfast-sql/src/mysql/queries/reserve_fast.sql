-- Reserve, fast path: the whole of it in the stored procedure of migration
-- 0004 (shop, key, fingerprint, ttl seconds, wants as JSON).
CALL holdfast_reserve_fast(?, ?, ?, ?, ?)
