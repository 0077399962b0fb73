-- The legacy Redis store's SQL ledger (migration 0003): the rows of one shop (and item), or
-- of every shop (shop or NULL, item or NULL).
SELECT shop_id, item_id, location_id, on_hand, committed FROM legacy_ledger
WHERE (? IS NULL OR shop_id = ?) AND (? IS NULL OR item_id = ?)
ORDER BY shop_id, item_id, location_id
