-- Reserve, second half of the take: delete the unit rows take_units locked.
-- MySQL has no DELETE … RETURNING (MariaDB has, but not with SKIP LOCKED or
-- LIMIT per line), so the take is a locking SELECT for the whole cart and
-- then this DELETE for the whole cart: two round trips, on both servers. The
-- rows come as one JSON array of {item, location, id}; JSON_TABLE drives the
-- join (STRAIGHT_JOIN) so every row is found by its full primary key
-- (eq_ref): the DELETE touches only rows this transaction already holds and
-- never waits. CONVERT … COLLATE gives the JSON text the columns' collation,
-- so the primary key can be used.
DELETE ru
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         item_id     VARCHAR(64) PATH '$.item',
         location_id VARCHAR(64) PATH '$.location',
         id          INT PATH '$.id')) AS d
STRAIGHT_JOIN reservation_units ru
    ON ru.shop_id = ?
   AND ru.item_id = CONVERT(d.item_id USING ascii) COLLATE ascii_bin
   AND ru.location_id = CONVERT(d.location_id USING ascii) COLLATE ascii_bin
   AND ru.id = d.id
