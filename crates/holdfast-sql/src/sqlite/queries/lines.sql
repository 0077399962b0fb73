-- The quantities of the reservations in ?2 (a JSON array of ids).
SELECT reservation_id, item_id, location_id, quantity
FROM reserved_quantities
WHERE shop_id = ?1 AND reservation_id IN (SELECT value FROM json_each(?2))
ORDER BY reservation_id, item_id, location_id
