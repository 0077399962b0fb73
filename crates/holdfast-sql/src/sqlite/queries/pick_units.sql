-- Reserve (alone and in batches) and stock decreases: for every wanted
-- (item, location), up to `qty` free unit rows, in one statement for the
-- whole cart or batch. ?2 is a JSON array of [item, location, qty]; a null
-- location means the first location, in location_id order, that stocks the
-- item. delete_units.sql deletes those given away, in the same transaction.
--
-- No SKIP LOCKED, and none needed: the transaction began with BEGIN
-- IMMEDIATE and holds SQLite's single write lock, so no other transaction
-- can have taken a row that is still visible here.
--
-- SQLite has no LATERAL, and a LIMIT cannot name an outer column, so `walk`
-- steps through each line's pool in slot order, one primary-key seek per
-- unit, and stops at `qty` or when the pool runs dry. (Numbering the rows
-- with row_number() instead reads and sorts the whole pool, up to pool_cap
-- rows, on every reserve: some 300 times slower at pool_cap 1,000.)
WITH RECURSIVE want AS MATERIALIZED (
    SELECT w.value ->> 0 AS item_id,
           COALESCE(w.value ->> 1, (
               SELECT l.location_id FROM inventory_levels l
               WHERE l.shop_id = ?1 AND l.item_id = w.value ->> 0
               ORDER BY l.location_id LIMIT 1)) AS location_id,
           w.value ->> 2 AS qty
    FROM json_each(?2) AS w
), walk (item_id, location_id, id, k, qty) AS (
    SELECT want.item_id, want.location_id,
           (SELECT min(u.id) FROM reservation_units u
            WHERE u.shop_id = ?1 AND u.item_id = want.item_id AND u.location_id = want.location_id),
           1, want.qty
    FROM want
    UNION ALL
    SELECT walk.item_id, walk.location_id,
           (SELECT min(u.id) FROM reservation_units u
            WHERE u.shop_id = ?1 AND u.item_id = walk.item_id AND u.location_id = walk.location_id
              AND u.id > walk.id),
           walk.k + 1, walk.qty
    FROM walk
    WHERE walk.id IS NOT NULL AND walk.k < walk.qty
)
SELECT item_id, location_id, id FROM walk WHERE id IS NOT NULL
