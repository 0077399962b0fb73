SELECT id, idempotency_key, fingerprint, status, expires_at, expires_at <= UTC_TIMESTAMP(6) AS expired
FROM reservations
WHERE shop_id = ? AND idempotency_key = ?
