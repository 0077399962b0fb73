-- Quantities per location with plain reads in one statement (one snapshot).
-- SQLite has no LATERAL: the pool and the open holds of the item are grouped
-- by location once and joined. A hold past its expiry is not reserved, even
-- before a sweep releases it: its units count as available, as they do for a
-- reserve, which may take them.
SELECT l.location_id,
       l.on_hand,
       l.unpooled + COALESCE(q.returned, 0) + COALESCE(p.n, 0) + COALESCE(x.lapsed, 0) AS available,
       COALESCE(q.held, 0) - COALESCE(x.lapsed, 0) AS reserved,
       l.committed + COALESCE(q.committed, 0) AS committed,
       COALESCE(x.unsettled, 0) > 0 AS unsettled
FROM inventory_levels l
LEFT JOIN (
    SELECT u.location_id, count(*) AS n
    FROM reservation_units u
    WHERE u.shop_id = ?1 AND u.item_id = ?2
    GROUP BY u.location_id
) p ON p.location_id = l.location_id
LEFT JOIN (
    SELECT q.location_id,
           sum(q.quantity) FILTER (WHERE q.state = 'held') AS held,
           sum(q.quantity) FILTER (WHERE q.state = 'committed') AS committed,
           sum(q.quantity) FILTER (WHERE q.state = 'returned') AS returned
    FROM reserved_quantities q
    WHERE q.shop_id = ?1 AND q.item_id = ?2 AND q.state IN ('held', 'committed', 'returned')
    GROUP BY q.location_id
) q ON q.location_id = l.location_id
LEFT JOIN (
    -- Driven by the expired holds (reservations_due). Expiry is judged by
    -- this statement's clock, read after its snapshot; ?3 is the caller's
    -- time before it (the same clock). A hold that expired in between makes
    -- its row unsettled: whether it had expired at the snapshot's moment is
    -- unknown, and the caller reads again.
    SELECT q.location_id, sum(q.quantity) AS lapsed,
           sum(r.expires_at > ?3) AS unsettled
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id AND q.item_id = ?2 AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000 AND r.shop_id = ?1
    GROUP BY q.location_id
) x ON x.location_id = l.location_id
WHERE l.shop_id = ?1 AND l.item_id = ?2
ORDER BY l.location_id
