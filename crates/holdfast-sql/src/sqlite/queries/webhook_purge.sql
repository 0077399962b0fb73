-- Webhooks: retention of delivered deliveries (delivered before ?1, at most
-- ?2 of them), oldest first.
DELETE FROM webhook_deliveries
WHERE id IN (
    SELECT id FROM webhook_deliveries
    WHERE status = 'delivered' AND delivered_at < ?1
    ORDER BY delivered_at
    LIMIT ?2
)
