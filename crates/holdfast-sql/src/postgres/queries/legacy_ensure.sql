-- The legacy Redis store's SQL ledger (migration 0003): creates the row of an
-- (item, location) if missing (shop, item, location).
INSERT INTO legacy_ledger (shop_id, item_id, location_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
