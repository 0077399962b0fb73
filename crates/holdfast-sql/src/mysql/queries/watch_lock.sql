-- Lock order step 5, the last lock a transaction takes: the watch rows of
-- the (item, location)s whose availability it changed (a JSON array of
-- {item, location} in byte order, which drives the join, so the rows are
-- locked in that order), for a shop subscribed to inventory.* topics. Their
-- holders only read and write events before they commit, so a wait here
-- ends with a commit. Parameters in placeholder order: keys, shop.
SELECT w.item_id, w.location_id, CAST(w.sold_out AS SIGNED) AS sold_out
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         item_id     VARCHAR(64) PATH '$.item',
         location_id VARCHAR(64) PATH '$.location')) AS k
STRAIGHT_JOIN inventory_watch w
    ON w.shop_id = ?
   AND w.item_id = CONVERT(k.item_id USING ascii) COLLATE ascii_bin
   AND w.location_id = CONVERT(k.location_id USING ascii) COLLATE ascii_bin
ORDER BY w.item_id, w.location_id
FOR UPDATE
