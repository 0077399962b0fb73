-- A batch's idempotency keys ($2) already used in shop $1.
SELECT idempotency_key FROM reservations WHERE shop_id = $1 AND idempotency_key = ANY ($2::text[])
