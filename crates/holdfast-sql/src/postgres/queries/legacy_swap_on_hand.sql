-- The legacy Redis store's SQL ledger (migration 0003): moves on_hand from an old value to a
-- new one if nobody changed it meanwhile (shop, item, location, old, new).
UPDATE legacy_ledger SET on_hand = $5
WHERE shop_id = $1 AND item_id = $2 AND location_id = $3 AND on_hand = $4
