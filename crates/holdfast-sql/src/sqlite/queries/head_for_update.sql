-- Lock order step 1 for claim, release and extend: the reservation rows (?2,
-- a JSON array of ids). There is no FOR UPDATE in SQLite and none is needed:
-- their transaction began with BEGIN IMMEDIATE and holds the database's
-- write lock.
SELECT id, idempotency_key, fingerprint, status, expires_at,
       expires_at <= unixepoch('subsec') * 1000 AS expired
FROM reservations
WHERE shop_id = ?1 AND id IN (SELECT value FROM json_each(?2))
ORDER BY id
