-- The legacy Redis store's SQL ledger (migration 0003): reconcile overwrites one row
-- (shop, item, location, on_hand, committed).
UPDATE legacy_ledger SET on_hand = ?4, committed = ?5
WHERE shop_id = ?1 AND item_id = ?2 AND location_id = ?3
