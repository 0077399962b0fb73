-- Moves the expiry of a hold whose row this transaction has locked (lock
-- order step 1), unless its time ran out meanwhile (no row: the engine goes
-- round again and answers `expired`). Sent last before the commit, like the
-- claims' re-check. The engine reads the new expires_at back with head.sql.
UPDATE reservations
SET expires_at = statement_timestamp() + $3::bigint * interval '1 second', updated_at = statement_timestamp()
WHERE shop_id = $1 AND id = $2
  AND expires_at > statement_timestamp()
