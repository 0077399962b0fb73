-- Deletes the unit rows pick_units.sql found and the caller gave away: ?2 is
-- a JSON array of [item, location, id].
DELETE FROM reservation_units
WHERE (shop_id, item_id, location_id, id) IN (
    SELECT ?1, u.value ->> 0, u.value ->> 1, u.value ->> 2 FROM json_each(?2) AS u)
