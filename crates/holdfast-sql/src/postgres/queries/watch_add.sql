-- The watch rows ($2: a JSON array of {item, location}) a shop does not have
-- yet, with nothing said (NULL). A concurrent insert of the same row makes
-- this wait for its commit and then do nothing.
INSERT INTO inventory_watch (shop_id, item_id, location_id)
SELECT $1, k.item, k.location
FROM json_to_recordset($2::json) AS k (item text, location text)
ORDER BY k.item, k.location
ON CONFLICT (shop_id, item_id, location_id) DO NOTHING
