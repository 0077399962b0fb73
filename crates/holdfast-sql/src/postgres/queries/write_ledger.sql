-- Writes back a ledger row this transaction holds locked.
UPDATE inventory_levels
SET on_hand = $4, committed = $5, unpooled = $6, updated_at = now()
WHERE shop_id = $1 AND item_id = $2 AND location_id = $3
