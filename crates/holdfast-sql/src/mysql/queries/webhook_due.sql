-- Webhooks: up to ? deliveries due at ?, in the order they fell due. A
-- delivery being sent is due again only when its lease runs out (its
-- next_attempt_at is the lease's end), so a worker that died hands its work
-- back. SKIP LOCKED: workers never wait for each other or take the same row.
SELECT id, lease_until
FROM webhook_deliveries
WHERE status = 'pending' AND next_attempt_at <= ?
ORDER BY next_attempt_at
LIMIT ?
FOR UPDATE SKIP LOCKED
