-- The sweeper's unit of work: expire up to ?1 due holds of any shop, oldest
-- first. Sweepers in other processes queue on the write lock (BEGIN
-- IMMEDIATE) instead of skipping each other's rows, and each finds only
-- holds the one before it left. The ids come back for move_held.
UPDATE reservations
SET status = 'expired',
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE id IN (
    SELECT r.id FROM reservations r
    WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000
    ORDER BY r.expires_at
    LIMIT ?1)
RETURNING shop_id, id
