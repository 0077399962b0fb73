-- Lock order step 2: the ledger rows of every candidate location, in
-- (item_id, location_id) order. SQLite locks the whole database, not rows:
-- BEGIN IMMEDIATE already holds the write lock, so this is a plain read, and
-- the order is the order the engine works through the rows in. $2 is a JSON
-- array of [item, location]; a null location stands for every location of
-- the item.
SELECT l.item_id, l.location_id, l.on_hand, l.committed, l.unpooled
FROM inventory_levels l
WHERE l.shop_id = ?1
  AND l.item_id IN (SELECT w.value ->> 0 FROM json_each(?2) AS w)
  AND EXISTS (
      SELECT 1 FROM json_each(?2) AS w
      WHERE w.value ->> 0 = l.item_id
        AND (w.value ->> 1 IS NULL OR w.value ->> 1 = l.location_id))
ORDER BY l.item_id, l.location_id
