-- Webhooks: the outcome of an attempt of a delivery (id, attempt, status,
-- next attempt — for a delivered one, when it was delivered —, the answer's
-- HTTP status or -1, error). Only while that attempt is the delivery's
-- latest: a worker whose lease ran out records nothing.
UPDATE webhook_deliveries
SET delivered_at = CASE WHEN ? = 'delivered' THEN ? END,
    status = ?,
    next_attempt_at = ?,
    lease_until = NULL,
    last_status = NULLIF(?, -1),
    last_error = ?
WHERE id = ? AND attempts = ? AND status = 'pending'
