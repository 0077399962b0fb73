-- Quantities per location with plain reads in one statement (one snapshot),
-- never SKIP LOCKED, which would hide rows that other transactions lock.
SELECT l.location_id,
       l.on_hand,
       l.unpooled + COALESCE(q.returned, 0) + COALESCE(p.n, 0) AS available,
       COALESCE(q.held, 0) AS reserved,
       l.committed + COALESCE(q.committed, 0) AS committed
FROM inventory_levels l
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM reservation_units u
    WHERE u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id
) p ON true
LEFT JOIN LATERAL (
    SELECT sum(quantity) FILTER (WHERE state = 'held') AS held,
           sum(quantity) FILTER (WHERE state = 'committed') AS committed,
           sum(quantity) FILTER (WHERE state = 'returned') AS returned
    FROM reserved_quantities q
    WHERE q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
      AND q.state IN ('held', 'committed', 'returned')
) q ON true
WHERE l.shop_id = $1 AND l.item_id = $2
ORDER BY l.location_id
