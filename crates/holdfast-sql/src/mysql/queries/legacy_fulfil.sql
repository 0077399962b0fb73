-- The legacy Redis store's SQL ledger (migration 0003): ships committed units; on_hand and
-- committed both fall (shop, item, location, quantity).
UPDATE legacy_ledger SET on_hand = on_hand - ?, committed = committed - ?
WHERE shop_id = ? AND item_id = ? AND location_id = ? AND committed >= ?
