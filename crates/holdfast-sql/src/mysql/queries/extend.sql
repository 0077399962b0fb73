-- Moves the expiry of a hold whose row this transaction has locked (lock
-- order step 1), unless its time ran out meanwhile (no row: the engine goes
-- round again and answers `expired`). Sent last before the commit, like the
-- claims' re-check. The engine reads the new expires_at back with head.sql.
UPDATE reservations
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? SECOND, updated_at = UTC_TIMESTAMP(6)
WHERE shop_id = ? AND id = ?
  AND expires_at > UTC_TIMESTAMP(6)
