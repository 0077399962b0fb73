-- Reserve, fast path and slow path: for every wanted (item, location), take up
-- to `qty` free unit rows and delete them, in one round trip for the whole
-- cart. PostgreSQL forbids locking clauses under UNION, so each line is a
-- LATERAL subquery with its own LIMIT and FOR UPDATE SKIP LOCKED: concurrent
-- buyers of a hot item take different rows instead of queueing on one.
-- A NULL location means the first location, in location_id order, that
-- stocks the item. Lock order: pool rows, SKIP LOCKED (never waits).
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
        FOR UPDATE SKIP LOCKED
    ) AS u
), taken AS (
    DELETE FROM reservation_units d
    USING picked p
    WHERE d.shop_id = $1 AND d.item_id = p.item_id AND d.location_id = p.location_id AND d.id = p.id
    RETURNING d.item_id, d.location_id
)
SELECT item_id, location_id, count(*) AS n
FROM taken
GROUP BY item_id, location_id
