SELECT item_id, location_id, quantity
FROM reserved_quantities
WHERE shop_id = ?1 AND reservation_id = ?2
ORDER BY item_id, location_id
