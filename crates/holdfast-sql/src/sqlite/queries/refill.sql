-- Replenish, under the write lock: insert up to ?5 unit rows into the free
-- slots 0..?4-1. SQLite has no generate_series by default, so the slots come
-- from a recursive CTE, which runs only as far as the LIMIT needs it.
WITH RECURSIVE slot (id) AS (
    SELECT 0 WHERE ?4 > 0
    UNION ALL
    SELECT id + 1 FROM slot WHERE id + 1 < ?4
)
INSERT INTO reservation_units (shop_id, item_id, location_id, id)
SELECT ?1, ?2, ?3, slot.id
FROM slot
WHERE NOT EXISTS (
    SELECT 1 FROM reservation_units u
    WHERE u.shop_id = ?1 AND u.item_id = ?2 AND u.location_id = ?3 AND u.id = slot.id)
ORDER BY slot.id
LIMIT ?5
