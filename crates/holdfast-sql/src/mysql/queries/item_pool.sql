-- (shop, item) → the units in its pool and how often its pool was
-- refilled, over its locations.
SELECT (SELECT COUNT(*) FROM reservation_units u WHERE u.shop_id = ? AND u.item_id = ?) AS pooled,
       (SELECT CAST(COALESCE(SUM(l.refills), 0) AS SIGNED) FROM inventory_levels l
        WHERE l.shop_id = ? AND l.item_id = ?) AS refills
