-- The legacy Redis store's SQL ledger (migration 0003): reconcile overwrites one row
-- (shop, item, location, on_hand, committed).
UPDATE legacy_ledger SET on_hand = ?, committed = ?
WHERE shop_id = ? AND item_id = ? AND location_id = ?
