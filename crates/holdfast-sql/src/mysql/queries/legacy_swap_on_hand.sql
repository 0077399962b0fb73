-- The legacy Redis store's SQL ledger (migration 0003): moves on_hand from an old value to a
-- new one if nobody changed it meanwhile (shop, item, location, old, new).
UPDATE legacy_ledger SET on_hand = ?
WHERE shop_id = ? AND item_id = ? AND location_id = ? AND on_hand = ?
