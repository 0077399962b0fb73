-- The terms of the accounting invariant for every (shop, item, location) of
-- one shop, or of all when the shop is NULL, read in the caller's REPEATABLE
-- READ consistent snapshot. MySQL has no FULL JOIN: the ledger rows, the pool
-- rows and the held quantities are read as one stream (UNION ALL) and summed
-- per (shop, item, location); a group with no ledger row is an orphan (units
-- no ledger row accounts for). SUM over integers is DECIMAL, hence the CASTs.
-- The shop parameter is bound once per `?`; the store adds the terms up
-- (run.rs, audit_row).
SELECT s.shop_id, s.item_id, s.location_id, MAX(s.ledger) = 0 AS orphan,
       CAST(SUM(s.on_hand) AS SIGNED) AS on_hand, CAST(SUM(s.unpooled) AS SIGNED) AS unpooled,
       CAST(SUM(s.booked) AS SIGNED) AS booked, CAST(SUM(s.pooled) AS SIGNED) AS pooled,
       CAST(SUM(s.held) AS SIGNED) AS held, CAST(SUM(s.claimed) AS SIGNED) AS claimed,
       CAST(SUM(s.returned) AS SIGNED) AS returned
FROM (
    SELECT shop_id, item_id, location_id, 1 AS ledger, on_hand, unpooled, committed AS booked,
           0 AS pooled, 0 AS held, 0 AS claimed, 0 AS returned
    FROM inventory_levels WHERE ? IS NULL OR shop_id = ?
    UNION ALL
    SELECT shop_id, item_id, location_id, 0, 0, 0, 0, 1, 0, 0, 0
    FROM reservation_units WHERE ? IS NULL OR shop_id = ?
    UNION ALL
    SELECT shop_id, item_id, location_id, 0, 0, 0, 0, 0,
           IF(state = 'held', quantity, 0), IF(state = 'committed', quantity, 0), IF(state = 'returned', quantity, 0)
    FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned') AND (? IS NULL OR shop_id = ?)
) s
GROUP BY s.shop_id, s.item_id, s.location_id
ORDER BY s.shop_id, s.item_id, s.location_id
