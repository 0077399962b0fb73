-- Webhooks: the queue for metrics: pending and dead deliveries, and when the
-- oldest pending one was written.
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending
FROM webhook_deliveries
WHERE status <> 'delivered'
