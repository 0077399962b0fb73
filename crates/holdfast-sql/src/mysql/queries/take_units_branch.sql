-- One branch of take_units.sql: up to ? unit rows of one (item, location).
SELECT ru.item_id, ru.location_id, ru.id
FROM reservation_units ru
WHERE ru.shop_id = ? AND ru.item_id = ?
  AND ru.location_id = COALESCE(?, (
      SELECT MIN(l.location_id) FROM inventory_levels l
      WHERE l.shop_id = ? AND l.item_id = ?))
LIMIT ?
