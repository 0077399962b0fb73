-- Lock order step 1: claim, release and extend lock the reservation row
-- first; a sweeper holding it makes them wait, then see its verdict.
SELECT id, idempotency_key, fingerprint, status, expires_at, expires_at <= now() AS expired
FROM reservations
WHERE shop_id = $1 AND id = $2
FOR UPDATE
