-- A coalesced batch's first statement: after pick_units.sql, the rows it
-- locked (the batch deals them out, and hold_batch.sql deletes those given
-- away), and which of the batch's idempotency keys ($5) are used already,
-- one probe each as in keys_used.sql: a row is a unit, or a used key.
, used AS (
    SELECT r.idempotency_key FROM unnest($5::text[]) AS k (key)
    CROSS JOIN LATERAL (
        SELECT idempotency_key FROM reservations WHERE shop_id = $1 AND idempotency_key = k.key LIMIT 1) r
)
SELECT item_id, location_id, id, NULL AS idempotency_key FROM picked
UNION ALL
SELECT NULL, NULL, NULL, idempotency_key FROM used
