-- Webhooks: leased deliveries (a JSON array of ids) with where to send them.
SELECT d.id, d.event_id, d.shop_id, d.subscription_id, d.topic, d.payload, d.status, d.attempts, d.created_at,
       d.next_attempt_at, d.last_status, d.last_error, d.delivered_at, s.url, s.secret
FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS l
STRAIGHT_JOIN webhook_deliveries d ON d.id = l.id
JOIN webhook_subscriptions s ON s.id = d.subscription_id
ORDER BY d.next_attempt_at, d.id
