-- Quantities per location with plain reads in one statement (one snapshot),
-- never SKIP LOCKED, which would hide rows that other transactions lock.
-- MariaDB has no LATERAL, so the per-location sums are grouped derived
-- tables; SUM over integers is DECIMAL on both servers, hence the CASTs.
SELECT l.location_id,
       l.on_hand,
       CAST(l.unpooled + COALESCE(q.returned, 0) + COALESCE(p.n, 0) AS SIGNED) AS available,
       CAST(COALESCE(q.held, 0) AS SIGNED) AS reserved,
       CAST(l.committed + COALESCE(q.committed, 0) AS SIGNED) AS committed
FROM inventory_levels l
LEFT JOIN (
    SELECT u.location_id, COUNT(*) AS n FROM reservation_units u
    WHERE u.shop_id = ? AND u.item_id = ?
    GROUP BY u.location_id
) p ON p.location_id = l.location_id
LEFT JOIN (
    SELECT q.location_id,
           SUM(CASE WHEN q.state = 'held' THEN q.quantity ELSE 0 END) AS held,
           SUM(CASE WHEN q.state = 'committed' THEN q.quantity ELSE 0 END) AS committed,
           SUM(CASE WHEN q.state = 'returned' THEN q.quantity ELSE 0 END) AS returned
    FROM reserved_quantities q
    WHERE q.shop_id = ? AND q.item_id = ? AND q.state IN ('held', 'committed', 'returned')
    GROUP BY q.location_id
) q ON q.location_id = l.location_id
WHERE l.shop_id = ? AND l.item_id = ?
ORDER BY l.location_id
