-- The held quantities of reservations just inserted, from a JSON array of
-- {id, item, location, qty} (MySQL has no arrays to bind).
INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
SELECT ?, a.id, a.item_id, a.location_id, a.qty, 'held'
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id          BIGINT PATH '$.id',
         item_id     VARCHAR(64) PATH '$.item',
         location_id VARCHAR(64) PATH '$.location',
         qty         INT PATH '$.qty')) AS a
