-- Claim (?3 = 'claimed') or release / expire the reservations in ?2 (a JSON
-- array of ids). Their held rows follow in move_held, in the same
-- transaction. The ledger row is not touched; the next transaction that
-- works on it folds these rows in.
UPDATE reservations
SET status = ?3,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE shop_id = ?1 AND id IN (SELECT value FROM json_each(?2))
