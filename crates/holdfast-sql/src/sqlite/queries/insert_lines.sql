-- The held quantities of the reservation insert_reservation just created.
-- ?3 is a JSON array of [item, location, quantity].
INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
SELECT ?1, ?2, a.value ->> 0, a.value ->> 1, a.value ->> 2, 'held'
FROM json_each(?3) AS a
