-- Webhooks: leases the deliveries webhook_due.sql locked (a JSON array of
-- ids) until $2, and counts the attempt.
UPDATE webhook_deliveries
SET attempts = attempts + 1, lease_until = $2, next_attempt_at = $2
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint))
