-- The quantities of the reservations in $2 (a JSON array of ids).
SELECT reservation_id, item_id, location_id, quantity
FROM reserved_quantities
WHERE shop_id = $1 AND reservation_id = ANY (ARRAY(SELECT jsonb_array_elements_text($2::jsonb)::bigint))
ORDER BY reservation_id, item_id, location_id
