-- Lock order step 5, the last lock a transaction takes: the watch rows of
-- the (item, location)s whose availability it changed ($2: a JSON array of
-- {item, location}), for a shop subscribed to inventory.* topics. Locked in
-- (item, location) order; their holders only read and write events before
-- they commit, so a wait here ends with a commit.
SELECT w.item_id, w.location_id, w.sold_out::int AS sold_out
FROM inventory_watch w
WHERE w.shop_id = $1
  AND (w.item_id, w.location_id) IN (
      SELECT k.item, k.location FROM json_to_recordset($2::json) AS k (item text, location text))
ORDER BY w.item_id, w.location_id
FOR UPDATE
