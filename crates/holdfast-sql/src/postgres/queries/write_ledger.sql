-- Writes back a ledger row this transaction holds locked.
-- $7 is 1 when this write follows a refill of its pool (counted in refills).
UPDATE inventory_levels
SET on_hand = $4, committed = $5, unpooled = $6, refills = refills + $7, updated_at = now()
WHERE shop_id = $1 AND item_id = $2 AND location_id = $3
