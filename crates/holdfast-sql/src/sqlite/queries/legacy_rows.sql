-- The legacy Redis store's SQL ledger (migration 0003): the rows of one shop (and item), or
-- of every shop (shop or NULL, item or NULL).
SELECT shop_id, item_id, location_id, on_hand, committed FROM legacy_ledger
WHERE (?1 IS NULL OR shop_id = ?1) AND (?2 IS NULL OR item_id = ?2)
ORDER BY shop_id, item_id, location_id
