-- Writes back a ledger row this transaction holds locked.
UPDATE inventory_levels
SET on_hand = ?, committed = ?, unpooled = ?, updated_at = UTC_TIMESTAMP(6)
WHERE shop_id = ? AND item_id = ? AND location_id = ?
