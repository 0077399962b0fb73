-- The lines of the reservations purge.sql deleted (a JSON array of
-- [shop_id, id]).
DELETE FROM reserved_quantities
WHERE (shop_id, reservation_id) IN (
    SELECT j.value ->> 0, j.value ->> 1 FROM json_each(?1) j)
