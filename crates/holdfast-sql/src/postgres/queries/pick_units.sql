-- The first half of take_units.sql and reserve_fast.sql (joined in
-- postgres/mod.rs, so both paths pick units the same way): for every wanted
-- (item, location), lock up to `qty` free unit rows. The locking clause and
-- pick_units_end.sql follow: FOR UPDATE SKIP LOCKED, or a plain FOR UPDATE
-- when a transaction under the ledger lock must wait for the rows fast-path
-- reserves still hold (docs/design.md, lock order). PostgreSQL forbids
-- locking clauses under UNION, so each line is a LATERAL subquery with its
-- own LIMIT and FOR UPDATE SKIP LOCKED: concurrent buyers of a hot item take
-- different rows instead of queueing on one. A NULL location means the first
-- location, in location_id order, that stocks the item.
-- $1 shop, $2 items, $3 locations (NULL: the first), $4 quantities.
WITH want AS (
    SELECT w.item_id,
           COALESCE(w.location_id, (
               SELECT l.location_id FROM inventory_levels l
               WHERE l.shop_id = $1 AND l.item_id = w.item_id
               ORDER BY l.location_id LIMIT 1)) AS location_id,
           w.qty
    FROM unnest($2::text[], $3::text[], $4::int[]) AS w (item_id, location_id, qty)
), picked AS (
    SELECT u.item_id, u.location_id, u.id
    FROM want CROSS JOIN LATERAL (
        SELECT ru.item_id, ru.location_id, ru.id
        FROM reservation_units ru
        WHERE ru.shop_id = $1 AND ru.item_id = want.item_id AND ru.location_id = want.location_id
        LIMIT want.qty
