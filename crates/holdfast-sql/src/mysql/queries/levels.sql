-- Quantities per location with plain reads in one statement (one snapshot),
-- never SKIP LOCKED, which would hide rows that other transactions lock. A
-- hold past its expiry is not reserved, even before a sweep releases it: its
-- units count as available, as they do for a reserve (available.sql).
-- MariaDB has no LATERAL, so the per-location sums are grouped derived
-- tables; SUM over integers is DECIMAL on both servers, hence the CASTs.
-- The third argument, a time from the caller's clock, is for SQLite.
SELECT l.location_id,
       l.on_hand,
       CAST(l.unpooled + COALESCE(q.returned, 0) + COALESCE(p.n, 0) + COALESCE(x.lapsed, 0) AS SIGNED) AS available,
       CAST(COALESCE(q.held, 0) - COALESCE(x.lapsed, 0) AS SIGNED) AS reserved,
       CAST(l.committed + COALESCE(q.committed, 0) AS SIGNED) AS committed,
       COALESCE(x.unsettled, 0) > 0 AS unsettled
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
LEFT JOIN (
    -- Driven by the expired holds (reservations_due). A hold that expired
    -- after `@snapshot_after` (a time before a report's snapshot, see
    -- BEGIN_SNAPSHOT) makes its row unsettled: the snapshot's moment lies
    -- between that time and this statement's, whether the hold had expired
    -- there is unknown, and the caller reads again. Elsewhere the variable
    -- is stale or NULL and the column means nothing.
    SELECT q.location_id, SUM(q.quantity) AS lapsed,
           SUM(r.expires_at > @snapshot_after) AS unsettled
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id AND q.item_id = ? AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6) AND r.shop_id = ?
    GROUP BY q.location_id
) x ON x.location_id = l.location_id
WHERE l.shop_id = ? AND l.item_id = ?
ORDER BY l.location_id
