-- Replenish, under the ledger lock (so one transaction refills an (item,
-- location) at a time): insert up to ? unit rows into free slots 0..cap-1.
-- There is no generate_series: slot numbers come from a recursive CTE of
-- thousands crossed with three digit tables, so the recursion depth is
-- cap / 1000 (MySQL stops recursion at cte_max_recursion_depth = 1000;
-- MariaDB's limit, max_recursive_iterations, is far higher).
-- At READ COMMITTED the NOT EXISTS is a consistent read that takes no locks
-- (at REPEATABLE READ INSERT … SELECT would take shared next-key locks and
-- wait for rows other buyers hold): a slot whose row another transaction
-- deleted but has not committed still looks taken, so this never waits on it.
INSERT INTO reservation_units (shop_id, item_id, location_id, id)
SELECT ?, ?, ?, slot.id
FROM (
    WITH RECURSIVE
        thousands (n) AS (SELECT 0 UNION ALL SELECT n + 1000 FROM thousands WHERE n + 1000 < ?),
        digits (d) AS (
            SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
            UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)
    SELECT k.n + 100 * h.d + 10 * t.d + u.d AS id
    FROM thousands k, digits h, digits t, digits u
) AS slot
WHERE slot.id < ?
  AND NOT EXISTS (
      SELECT 1 FROM reservation_units x
      WHERE x.shop_id = ? AND x.item_id = ? AND x.location_id = ? AND x.id = slot.id)
ORDER BY slot.id
LIMIT ?
