-- What the inventory events now say of watch rows this transaction holds (a
-- JSON array of {item, location, sold_out: 0 or 1}). Parameters in
-- placeholder order: rows, shop.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
           item_id     VARCHAR(64) PATH '$.item',
           location_id VARCHAR(64) PATH '$.location',
           sold_out    INT PATH '$.sold_out')) AS k
STRAIGHT_JOIN inventory_watch w
    ON w.shop_id = ?
   AND w.item_id = CONVERT(k.item_id USING ascii) COLLATE ascii_bin
   AND w.location_id = CONVERT(k.location_id USING ascii) COLLATE ascii_bin
SET w.sold_out = k.sold_out
