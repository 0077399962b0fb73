-- The watch rows (a JSON array of {item, location}) a shop does not have
-- yet, with nothing said (NULL). Parameters in placeholder order: shop, keys.
INSERT IGNORE INTO inventory_watch (shop_id, item_id, location_id)
SELECT ?, CONVERT(k.item_id USING ascii) COLLATE ascii_bin, CONVERT(k.location_id USING ascii) COLLATE ascii_bin
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         item_id     VARCHAR(64) PATH '$.item',
         location_id VARCHAR(64) PATH '$.location')) AS k
