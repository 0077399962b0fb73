-- The candidate ledger rows of lock_ledgers.sql and available.sql, in
-- (item_id, location_id) order: $1 shop, $2 items, $3 locations (NULL:
-- every location of the item).
FROM inventory_levels l
WHERE l.shop_id = $1
  AND l.item_id = ANY ($2::text[])
  AND EXISTS (
      SELECT 1 FROM unnest($2::text[], $3::text[]) AS w (item_id, location_id)
      WHERE w.item_id = l.item_id AND (w.location_id IS NULL OR w.location_id = l.location_id))
ORDER BY l.item_id, l.location_id
