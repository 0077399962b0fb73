-- Moves the expiry of a hold whose row this transaction has locked (lock
-- order step 1); the engine reads the new expires_at back with head.sql.
UPDATE reservations
SET expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?3 * 1000,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE shop_id = ?1 AND id = ?2
