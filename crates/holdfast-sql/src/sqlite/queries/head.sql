-- The reservation row.
SELECT id, idempotency_key, fingerprint, status, expires_at,
       expires_at <= unixepoch('subsec') * 1000 AS expired
FROM reservations
WHERE shop_id = ?1 AND id = ?2
