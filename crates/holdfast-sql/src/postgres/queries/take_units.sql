-- Reserve, slow path: after pick_units.sql, delete the rows picked, in one
-- round trip for the whole cart (the fast path does the same and more in
-- reserve_fast.sql). Lock order step 3: pool rows, with the locking clause
-- pick_units.sql was given.
, taken AS (
    DELETE FROM reservation_units d
    USING picked p
    WHERE d.shop_id = $1 AND d.item_id = p.item_id AND d.location_id = p.location_id AND d.id = p.id
    RETURNING d.item_id, d.location_id
)
SELECT item_id, location_id, count(*) AS n
FROM taken
GROUP BY item_id, location_id
