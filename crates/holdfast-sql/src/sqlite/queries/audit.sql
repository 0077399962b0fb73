-- The terms of the accounting invariant for every ledger row (of one shop,
-- or all when ?1 is NULL), read in one deferred transaction: under WAL that
-- is one snapshot, however long the audit takes.
SELECT l.shop_id, l.item_id, l.location_id,
       l.on_hand,
       l.unpooled + COALESCE(q.returned, 0) AS unpooled,
       COALESCE(p.n, 0) AS pooled,
       COALESCE(q.held, 0) AS reserved,
       l.committed + COALESCE(q.committed, 0) AS committed
FROM inventory_levels l
LEFT JOIN (
    SELECT shop_id, item_id, location_id, count(*) AS n
    FROM reservation_units
    WHERE ?1 IS NULL OR shop_id = ?1
    GROUP BY shop_id, item_id, location_id
) p USING (shop_id, item_id, location_id)
LEFT JOIN (
    SELECT shop_id, item_id, location_id,
           sum(quantity) FILTER (WHERE state = 'held') AS held,
           sum(quantity) FILTER (WHERE state = 'committed') AS committed,
           sum(quantity) FILTER (WHERE state = 'returned') AS returned
    FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned') AND (?1 IS NULL OR shop_id = ?1)
    GROUP BY shop_id, item_id, location_id
) q USING (shop_id, item_id, location_id)
WHERE ?1 IS NULL OR l.shop_id = ?1
ORDER BY l.shop_id, l.item_id, l.location_id
