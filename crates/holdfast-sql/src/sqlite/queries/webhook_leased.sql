-- Webhooks: leased deliveries (a JSON array of ids) with where to send them.
SELECT d.id, d.event_id, d.shop_id, d.subscription_id, d.topic, d.payload, d.status, d.attempts, d.created_at,
       d.next_attempt_at, d.last_status, d.last_error, d.delivered_at, s.url, s.secret
FROM webhook_deliveries d
JOIN webhook_subscriptions s ON s.id = d.subscription_id
WHERE d.id IN (SELECT value FROM json_each(?1))
ORDER BY d.next_attempt_at, d.id
