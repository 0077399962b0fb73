-- Units in the pool or in open holds whose (item, location) has no ledger row.
SELECT o.shop_id, o.item_id, o.location_id,
       CAST(SUM(o.pooled) AS SIGNED) AS pooled, CAST(SUM(o.open) AS SIGNED) AS open
FROM (
    SELECT shop_id, item_id, location_id, 1 AS pooled, 0 AS open FROM reservation_units
    UNION ALL
    SELECT shop_id, item_id, location_id, 0, quantity FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned')
) o
WHERE (? IS NULL OR o.shop_id = ?)
  AND NOT EXISTS (
      SELECT 1 FROM inventory_levels l
      WHERE l.shop_id = o.shop_id AND l.item_id = o.item_id AND l.location_id = o.location_id)
GROUP BY o.shop_id, o.item_id, o.location_id
