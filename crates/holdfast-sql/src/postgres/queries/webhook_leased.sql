-- Webhooks: leased deliveries (a JSON array of ids) with where to send them.
-- One primary-key probe per id, whatever the table's size when the plan was
-- made (docs/design.md, "Plans").
SELECT d.id, d.event_id, d.shop_id, d.subscription_id, d.topic, d.payload, d.status, d.attempts, d.created_at,
       d.next_attempt_at, d.last_status, d.last_error, d.delivered_at, s.url, s.secret
FROM jsonb_array_elements_text($1::jsonb) AS k (id)
CROSS JOIN LATERAL (
    SELECT * FROM webhook_deliveries WHERE id = k.id::bigint LIMIT 1
) d
JOIN webhook_subscriptions s ON s.id = d.subscription_id
ORDER BY d.next_attempt_at, d.id
