SELECT item_id, location_id, quantity
FROM reserved_quantities
WHERE shop_id = ? AND reservation_id = ?
ORDER BY item_id, location_id
