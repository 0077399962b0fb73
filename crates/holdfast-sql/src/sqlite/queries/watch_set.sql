-- What the inventory events now say of watch rows (?2: a JSON array of
-- {item, location, sold_out: 0 or 1}).
UPDATE inventory_watch AS w
SET sold_out = json_extract(k.value, '$.sold_out')
FROM json_each(?2) AS k
WHERE w.shop_id = ?1
  AND w.item_id = json_extract(k.value, '$.item')
  AND w.location_id = json_extract(k.value, '$.location')
