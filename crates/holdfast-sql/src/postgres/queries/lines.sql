-- The quantities of the reservations in $2 (a JSON array of ids): one
-- primary-key range per id (OFFSET 0 keeps the planner from turning the
-- LATERAL into a join over the whole table; docs/design.md, "Plans").
SELECT q.reservation_id, q.item_id, q.location_id, q.quantity
FROM jsonb_array_elements_text($2::jsonb) AS k (id)
CROSS JOIN LATERAL (
    SELECT reservation_id, item_id, location_id, quantity
    FROM reserved_quantities
    WHERE shop_id = $1 AND reservation_id = k.id::bigint
    OFFSET 0
) q
ORDER BY q.reservation_id, q.item_id, q.location_id
