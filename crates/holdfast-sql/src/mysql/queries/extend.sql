-- Moves the expiry of a hold whose row this transaction has locked (lock
-- order step 1); the engine reads the new expires_at back with head.sql.
UPDATE reservations
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? SECOND, updated_at = UTC_TIMESTAMP(6)
WHERE shop_id = ? AND id = ?
