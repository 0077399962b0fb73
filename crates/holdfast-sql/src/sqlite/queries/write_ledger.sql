-- Writes back a ledger row this transaction read under the write lock.
UPDATE inventory_levels
SET on_hand = ?4, committed = ?5, unpooled = ?6,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE shop_id = ?1 AND item_id = ?2 AND location_id = ?3
