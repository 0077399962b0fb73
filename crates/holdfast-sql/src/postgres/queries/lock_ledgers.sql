-- Lock order step 2: the ledger rows of every candidate location, all in one
-- statement, in (item_id, location_id) order (LockRows runs above the Sort, so
-- rows are locked in the order they are returned). A NULL location stands for
-- every location of the item.
SELECT l.item_id, l.location_id, l.on_hand, l.committed, l.unpooled
FROM inventory_levels l
WHERE l.shop_id = $1
  AND l.item_id = ANY ($2::text[])
  AND EXISTS (
      SELECT 1 FROM unnest($2::text[], $3::text[]) AS w (item_id, location_id)
      WHERE w.item_id = l.item_id AND (w.location_id IS NULL OR w.location_id = l.location_id))
ORDER BY l.item_id, l.location_id
FOR UPDATE
