-- Deletes unit rows this transaction picked (and locked): $2 items, $3
-- locations, $4 ids.
DELETE FROM reservation_units d
USING unnest($2::text[], $3::text[], $4::bigint[]) AS u (item_id, location_id, id)
WHERE d.shop_id = $1 AND d.item_id = u.item_id AND d.location_id = u.location_id AND d.id = u.id
