-- The held quantities of reservations just inserted. ?2 is a JSON array of
-- [reservation id, item, location, quantity].
INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
SELECT ?1, a.value ->> 0, a.value ->> 1, a.value ->> 2, a.value ->> 3, 'held'
FROM json_each(?2) AS a
