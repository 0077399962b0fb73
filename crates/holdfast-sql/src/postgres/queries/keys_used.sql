-- A batch's idempotency keys ($2) already used in shop $1. One probe of the
-- unique key per key (LATERAL … LIMIT 1 keeps the planner from joining or
-- filtering instead): the generic plan is made on the connection's first
-- run, often on a table still nearly empty, and must stay right as it grows
-- (docs/design.md, "Plans").
SELECT r.idempotency_key
FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
    SELECT idempotency_key FROM reservations
    WHERE shop_id = $1 AND idempotency_key = k.key
    LIMIT 1
) r
