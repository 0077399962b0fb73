-- Reserve, fast path and slow path, and stock decreases: for every wanted
-- (item, location), take up to `qty` free unit rows and delete them, in one
-- statement for the whole cart. $2 is a JSON array of [item, location, qty];
-- a null location means the first location, in location_id order, that
-- stocks the item.
--
-- No SKIP LOCKED, and none needed: the transaction began with BEGIN
-- IMMEDIATE and holds SQLite's single write lock, so no other transaction
-- can have taken a row that is still visible here. Each line's rows are
-- numbered by slot and the first `qty` go (SQLite has no LATERAL, and a
-- LIMIT cannot name an outer column). `want` is materialized and CROSS
-- JOINed so that it drives the loop: one primary-key range per line, never
-- a scan of the shop's whole pool. The rows come back one per unit; the
-- caller counts them (RETURNING cannot be aggregated in SQLite).
WITH want AS MATERIALIZED (
    SELECT w.value ->> 0 AS item_id,
           COALESCE(w.value ->> 1, (
               SELECT l.location_id FROM inventory_levels l
               WHERE l.shop_id = ?1 AND l.item_id = w.value ->> 0
               ORDER BY l.location_id LIMIT 1)) AS location_id,
           w.value ->> 2 AS qty
    FROM json_each(?2) AS w
), picked AS (
    SELECT u.item_id, u.location_id, u.id, want.qty,
           row_number() OVER (PARTITION BY u.item_id, u.location_id ORDER BY u.id) AS n
    FROM want CROSS JOIN reservation_units u
        ON u.shop_id = ?1 AND u.item_id = want.item_id AND u.location_id = want.location_id
)
DELETE FROM reservation_units
WHERE (shop_id, item_id, location_id, id) IN (
    SELECT ?1, p.item_id, p.location_id, p.id FROM picked p WHERE p.n <= p.qty)
RETURNING item_id, location_id
