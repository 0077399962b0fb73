-- Writes back a ledger row this transaction holds locked.
-- The seventh argument is 1 when this write follows a refill of its pool (counted in refills).
UPDATE inventory_levels
SET on_hand = ?, committed = ?, unpooled = ?, refills = refills + ?, updated_at = UTC_TIMESTAMP(6)
WHERE shop_id = ? AND item_id = ? AND location_id = ?
