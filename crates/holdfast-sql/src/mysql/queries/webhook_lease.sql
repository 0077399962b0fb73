-- Webhooks: leases the deliveries webhook_due.sql locked (a JSON array of
-- ids) until the time given, and counts the attempt.
UPDATE webhook_deliveries d
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS l ON l.id = d.id
SET d.attempts = d.attempts + 1, d.lease_until = ?, d.next_attempt_at = ?
