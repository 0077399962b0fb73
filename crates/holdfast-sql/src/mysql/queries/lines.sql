-- The quantities of the reservations in a JSON array of ids. Parameters in
-- placeholder order: ids, shop.
SELECT q.reservation_id, q.item_id, q.location_id, q.quantity
FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
STRAIGHT_JOIN reserved_quantities q ON q.shop_id = ? AND q.reservation_id = d.id
ORDER BY q.reservation_id, q.item_id, q.location_id
