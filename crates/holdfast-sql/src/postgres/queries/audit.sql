-- After ledger_terms.sql: the terms of the accounting invariant for every
-- (shop, item, location) of one shop, or of all when $1 is NULL, read in the
-- caller's REPEATABLE READ snapshot; then, as orphans, units in the pool or
-- in open holds that no ledger row accounts for. The store adds the terms up
-- (run.rs, audit_row).
SELECT shop_id, item_id, location_id, false AS orphan, on_hand, unpooled, booked, pooled, held, claimed, returned
FROM terms
WHERE $1::text IS NULL OR shop_id = $1
UNION ALL
SELECT o.shop_id, o.item_id, o.location_id, true,
       0, 0, 0, count(*) FILTER (WHERE o.unit), COALESCE(sum(o.quantity) FILTER (WHERE NOT o.unit), 0), 0, 0
FROM (
    SELECT shop_id, item_id, location_id, true AS unit, 1 AS quantity FROM reservation_units
    UNION ALL
    SELECT shop_id, item_id, location_id, false, quantity FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned')
) o
WHERE ($1::text IS NULL OR o.shop_id = $1)
  AND NOT EXISTS (
      SELECT 1 FROM inventory_levels x
      WHERE x.shop_id = o.shop_id AND x.item_id = o.item_id AND x.location_id = o.location_id)
GROUP BY o.shop_id, o.item_id, o.location_id
ORDER BY 1, 2, 3
