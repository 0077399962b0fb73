-- The legacy Redis store's SQL ledger (migration 0003): the SQL half of a legacy claim, one
-- line of it (shop, item, location, quantity); the claim sends its lines in
-- (item, location) order in one transaction, so two claims never deadlock.
UPDATE legacy_ledger SET committed = committed + ?
WHERE shop_id = ? AND item_id = ? AND location_id = ?
