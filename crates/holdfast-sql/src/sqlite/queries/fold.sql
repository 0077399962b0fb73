-- Under the write lock, for a ledger row the engine works on: mark claimed
-- units 'settled' and released units 'restocked'. The caller sums the
-- returned rows into the ledger row's committed and unpooled (RETURNING
-- cannot be aggregated in SQLite). Claims and releases only flip their own
-- rows; this is where their units reach the ledger.
UPDATE reserved_quantities
SET state = CASE state WHEN 'returned' THEN 'restocked' ELSE 'settled' END
WHERE shop_id = ?1 AND item_id = ?2 AND location_id = ?3 AND state IN ('returned', 'committed')
RETURNING state, quantity
