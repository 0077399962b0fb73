-- The candidate ledger rows of lock_ledgers.sql and available.sql, in
-- (item_id, location_id) order: ?1 shop, ?2 a JSON array of [item, location];
-- a null location stands for every location of the item.
FROM inventory_levels l
WHERE l.shop_id = ?1
  AND l.item_id IN (SELECT w.value ->> 0 FROM json_each(?2) AS w)
  AND EXISTS (
      SELECT 1 FROM json_each(?2) AS w
      WHERE w.value ->> 0 = l.item_id
        AND (w.value ->> 1 IS NULL OR w.value ->> 1 = l.location_id))
ORDER BY l.item_id, l.location_id
