-- Webhooks: the outcomes of a round of attempts in one statement (a JSON
-- array of {id, attempt, status, at_ms, http, error}: the next attempt, or
-- for a delivered one when it was delivered, in unix ms; the answer's HTTP
-- status or -1). Only where that attempt is the delivery's latest: a worker
-- whose lease ran out records nothing.
UPDATE webhook_deliveries
SET status = o.status,
    next_attempt_at = o.at_ms,
    lease_until = NULL,
    last_status = NULLIF(o.http, -1),
    last_error = o.error,
    delivered_at = CASE WHEN o.status = 'delivered' THEN o.at_ms END
FROM (
    SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.attempt') AS attempt,
           json_extract(value, '$.status') AS status, json_extract(value, '$.at_ms') AS at_ms,
           json_extract(value, '$.http') AS http, json_extract(value, '$.error') AS error
    FROM json_each(?1)
) AS o
WHERE webhook_deliveries.id = o.id AND webhook_deliveries.attempts = o.attempt
  AND webhook_deliveries.status = 'pending'
