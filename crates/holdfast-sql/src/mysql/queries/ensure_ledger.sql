-- Stock changes: create the ledger row on first use. ON DUPLICATE KEY UPDATE
-- with a no-op rather than INSERT IGNORE, which would also silence other
-- errors. The existing row is locked here; the caller locks it next anyway.
INSERT INTO inventory_levels (shop_id, item_id, location_id)
VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE shop_id = shop_id
