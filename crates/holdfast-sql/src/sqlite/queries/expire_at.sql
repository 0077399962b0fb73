-- Reserve came up short (or a stock change): expire the held reservations
-- that have units at this (item, location) and whose time is up, now instead
-- of waiting for the sweeper, so sweeper lag never causes undersell. Under
-- the single write lock no sweeper or claim can be working on one of them,
-- so every due hold is taken (PostgreSQL skips locked ones). The ids come
-- back for move_held, which returns their units: SQLite has no
-- data-modifying CTEs, so that is a second statement.
UPDATE reservations
SET status = 'expired',
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE shop_id = ?1
  AND status = 'held'
  AND expires_at <= unixepoch('subsec') * 1000
  -- From the (few) expired holds to their rows by primary key, not from
  -- every live hold of a hot item.
  AND EXISTS (
      SELECT 1 FROM reserved_quantities q
      WHERE q.shop_id = reservations.shop_id AND q.reservation_id = reservations.id
        AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'held')
RETURNING shop_id, id
