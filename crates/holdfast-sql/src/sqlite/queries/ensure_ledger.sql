-- Stock changes: create the ledger row on first use.
INSERT INTO inventory_levels (shop_id, item_id, location_id)
VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING
