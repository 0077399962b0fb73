-- Moves the expiry of a hold whose row this transaction has locked; the new
-- expires_at is read back with head.sql (no UPDATE … RETURNING).
UPDATE reservations
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? SECOND, updated_at = UTC_TIMESTAMP(6)
WHERE shop_id = ? AND id = ?
