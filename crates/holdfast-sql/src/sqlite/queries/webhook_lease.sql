-- Webhooks: leases the deliveries webhook_due.sql found (a JSON array of
-- ids) until ?2, and counts the attempt.
UPDATE webhook_deliveries
SET attempts = attempts + 1, lease_until = ?2, next_attempt_at = ?2
WHERE id IN (SELECT value FROM json_each(?1))
