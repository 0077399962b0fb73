-- Webhooks: the outcomes of a round of attempts in one statement (a JSON
-- array of {id, attempt, status, at_ms, http, error}: the next attempt, or
-- for a delivered one when it was delivered, in unix ms; the answer's HTTP
-- status or -1). Only where that attempt is the delivery's latest: a worker
-- whose lease ran out records nothing. Times are UTC, as UTC_TIMESTAMP.
UPDATE webhook_deliveries d
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    id BIGINT PATH '$.id',
    attempt INT PATH '$.attempt',
    status VARCHAR(16) PATH '$.status',
    at_ms BIGINT PATH '$.at_ms',
    http INT PATH '$.http',
    error TEXT PATH '$.error'
)) AS o ON d.id = o.id AND d.attempts = o.attempt AND d.status = 'pending'
SET d.delivered_at = CASE WHEN o.status = 'delivered'
                          THEN TIMESTAMPADD(MICROSECOND, o.at_ms * 1000, '1970-01-01 00:00:00') END,
    d.status = o.status,
    d.next_attempt_at = TIMESTAMPADD(MICROSECOND, o.at_ms * 1000, '1970-01-01 00:00:00'),
    d.lease_until = NULL,
    d.last_status = NULLIF(o.http, -1),
    d.last_error = o.error
