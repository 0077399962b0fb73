-- Moves the expiry of a hold whose row this transaction has locked (lock
-- order step 1); the engine reads the new expires_at back with head.sql.
UPDATE reservations
SET expires_at = now() + $3::bigint * interval '1 second', updated_at = now()
WHERE shop_id = $1 AND id = $2
