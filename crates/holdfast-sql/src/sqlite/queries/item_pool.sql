-- (shop, item) → the units in its pool and how often its pool was
-- refilled, over its locations.
SELECT (SELECT count(*) FROM reservation_units u WHERE u.shop_id = ?1 AND u.item_id = ?2) AS pooled,
       (SELECT COALESCE(sum(l.refills), 0) FROM inventory_levels l
        WHERE l.shop_id = ?1 AND l.item_id = ?2) AS refills
