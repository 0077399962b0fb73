-- The second half of transition, expire_at and sweep: move the held units of
-- the reservations in ?1 (a JSON array of [shop_id, reservation_id]) to ?2,
-- 'committed' (claimed) or 'returned' (released or expired).
UPDATE reserved_quantities
SET state = ?2
WHERE (shop_id, reservation_id) IN (SELECT r.value ->> 0, r.value ->> 1 FROM json_each(?1) AS r)
  AND state = 'held'
