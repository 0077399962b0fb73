-- Webhooks: the outcomes of a round of attempts in one statement (a JSON
-- array of {id, attempt, status, at_ms, http, error}: the next attempt, or
-- for a delivered one when it was delivered, in unix ms; the answer's HTTP
-- status or -1). Only where that attempt is the delivery's latest: a worker
-- whose lease ran out records nothing.
UPDATE webhook_deliveries d
SET status = o.status,
    next_attempt_at = to_timestamp(o.at_ms / 1000.0),
    lease_until = NULL,
    last_status = NULLIF(o.http, -1),
    last_error = o.error,
    delivered_at = CASE WHEN o.status = 'delivered' THEN to_timestamp(o.at_ms / 1000.0) END
FROM json_to_recordset($1::json) AS o (id bigint, attempt integer, status text, at_ms bigint, http integer, error text)
WHERE d.id = o.id AND d.attempts = o.attempt AND d.status = 'pending'
