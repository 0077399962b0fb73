-- Webhooks: retention of delivered deliveries (delivered before the time
-- given, at most so many), oldest first.
DELETE FROM webhook_deliveries
WHERE status = 'delivered' AND delivered_at < ?
ORDER BY delivered_at
LIMIT ?
