-- The watch rows of the (item, location)s whose availability a transaction
-- changed (?2: a JSON array of {item, location}), for a shop subscribed to
-- inventory.* topics. No FOR UPDATE in SQLite and none needed: the
-- transaction began with BEGIN IMMEDIATE and holds the write lock.
SELECT w.item_id, w.location_id, w.sold_out
FROM inventory_watch w
JOIN json_each(?2) AS k
  ON w.item_id = json_extract(k.value, '$.item') AND w.location_id = json_extract(k.value, '$.location')
WHERE w.shop_id = ?1
ORDER BY w.item_id, w.location_id
