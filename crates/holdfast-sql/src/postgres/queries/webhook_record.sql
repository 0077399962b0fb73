-- Webhooks: the outcome of attempt $2 of delivery $1: status $3, next
-- attempt $4 (for a delivered one, when it was delivered), the answer's
-- HTTP status $5 (-1: none) and error $6. Only while that attempt is the
-- delivery's latest: a worker whose lease ran out records nothing.
UPDATE webhook_deliveries
SET status = $3,
    next_attempt_at = $4,
    lease_until = NULL,
    last_status = NULLIF($5::bigint, -1),
    last_error = $6,
    delivered_at = CASE WHEN $3 = 'delivered' THEN $4 END
WHERE id = $1 AND attempts = $2::bigint AND status = 'pending'
