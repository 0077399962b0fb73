-- Webhooks: up to ?2 deliveries due at ?1, in the order they fell due. A
-- delivery being sent is due again only when its lease runs out (its
-- next_attempt_at is the lease's end), so a worker that died hands its work
-- back. The transaction holds the database's write lock: no other worker
-- takes the same rows.
SELECT id, lease_until
FROM webhook_deliveries
WHERE status = 'pending' AND next_attempt_at <= ?1
ORDER BY next_attempt_at
LIMIT ?2
