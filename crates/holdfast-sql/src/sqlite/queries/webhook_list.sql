-- Webhooks: a shop's deliveries, newest first (shop, status or NULL, limit).
SELECT id, event_id, shop_id, subscription_id, topic, payload, status, attempts, created_at, next_attempt_at,
       last_status, last_error, delivered_at
FROM webhook_deliveries
WHERE shop_id = ?1 AND (?2 IS NULL OR status = ?2)
ORDER BY id DESC
LIMIT ?3
