-- What the inventory events now say of watch rows this transaction holds
-- ($2: a JSON array of {item, location, sold_out: 0 or 1}).
UPDATE inventory_watch w
SET sold_out = (k.sold_out = 1)
FROM json_to_recordset($2::json) AS k (item text, location text, sold_out int)
WHERE w.shop_id = $1 AND w.item_id = k.item AND w.location_id = k.location
