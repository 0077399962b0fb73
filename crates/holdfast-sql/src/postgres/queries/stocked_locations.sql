-- The (item, location) pairs holdfast's own ledger knows for a shop (a plain
-- read), for reconciling the legacy Redis store from SQL.
SELECT item_id, location_id FROM inventory_levels WHERE shop_id = $1 ORDER BY item_id, location_id
