-- The terms of the accounting invariant for every ledger row (of one shop,
-- or all when the shop is NULL), read in the caller's REPEATABLE READ
-- consistent snapshot. The shop parameter is bound once per `?`.
SELECT l.shop_id, l.item_id, l.location_id,
       l.on_hand,
       CAST(l.unpooled + COALESCE(q.returned, 0) AS SIGNED) AS unpooled,
       CAST(COALESCE(p.n, 0) AS SIGNED) AS pooled,
       CAST(COALESCE(q.held, 0) AS SIGNED) AS reserved,
       CAST(l.committed + COALESCE(q.committed, 0) AS SIGNED) AS committed
FROM inventory_levels l
LEFT JOIN (
    SELECT shop_id, item_id, location_id, COUNT(*) AS n
    FROM reservation_units
    WHERE ? IS NULL OR shop_id = ?
    GROUP BY shop_id, item_id, location_id
) p ON p.shop_id = l.shop_id AND p.item_id = l.item_id AND p.location_id = l.location_id
LEFT JOIN (
    SELECT shop_id, item_id, location_id,
           SUM(CASE WHEN state = 'held' THEN quantity ELSE 0 END) AS held,
           SUM(CASE WHEN state = 'committed' THEN quantity ELSE 0 END) AS committed,
           SUM(CASE WHEN state = 'returned' THEN quantity ELSE 0 END) AS returned
    FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned') AND (? IS NULL OR shop_id = ?)
    GROUP BY shop_id, item_id, location_id
) q ON q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
WHERE ? IS NULL OR l.shop_id = ?
ORDER BY l.shop_id, l.item_id, l.location_id
