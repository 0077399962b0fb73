-- The watch rows (?2: a JSON array of {item, location}) a shop does not have
-- yet, with nothing said (NULL).
INSERT OR IGNORE INTO inventory_watch (shop_id, item_id, location_id)
SELECT ?1, json_extract(k.value, '$.item'), json_extract(k.value, '$.location')
FROM json_each(?2) AS k
