-- Webhooks: the queue for metrics: pending and dead deliveries, and when the
-- oldest pending one was written.
SELECT COALESCE(SUM(status = 'pending'), 0) AS pending,
       COALESCE(SUM(status = 'dead'), 0) AS dead,
       MIN(CASE WHEN status = 'pending' THEN created_at END) AS oldest_pending
FROM webhook_deliveries
WHERE status IN ('pending', 'dead')
