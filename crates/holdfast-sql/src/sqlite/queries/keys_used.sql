-- A batch's idempotency keys (?2, a JSON array) already used in shop ?1.
SELECT idempotency_key
FROM reservations
WHERE shop_id = ?1 AND idempotency_key IN (SELECT value FROM json_each(?2))
