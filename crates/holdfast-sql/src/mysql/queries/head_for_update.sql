-- Lock order step 1: claim, release and extend lock the reservation row
-- first; a sweeper holding it makes them wait, then see its verdict (READ
-- COMMITTED: the locking read returns the latest committed version).
SELECT id, idempotency_key, fingerprint, status, expires_at, expires_at <= UTC_TIMESTAMP(6) AS expired
FROM reservations
WHERE shop_id = ? AND id = ?
FOR UPDATE
