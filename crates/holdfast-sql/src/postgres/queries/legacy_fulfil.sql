-- The legacy Redis store's SQL ledger (migration 0003): ships committed units; on_hand and
-- committed both fall (shop, item, location, quantity).
UPDATE legacy_ledger SET on_hand = on_hand - $4, committed = committed - $4
WHERE shop_id = $1 AND item_id = $2 AND location_id = $3 AND committed >= $4
