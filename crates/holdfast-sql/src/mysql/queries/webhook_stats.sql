-- Webhooks: the queue for metrics: pending and dead deliveries, and when the
-- oldest pending one was written.
SELECT CAST(COALESCE(SUM(status = 'pending'), 0) AS SIGNED) AS pending,
       CAST(COALESCE(SUM(status = 'dead'), 0) AS SIGNED) AS dead,
       MIN(CASE WHEN status = 'pending' THEN created_at END) AS oldest_pending
FROM webhook_deliveries
WHERE status IN ('pending', 'dead')
