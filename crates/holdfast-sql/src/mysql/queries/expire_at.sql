-- Reserve came up short (or a stock change): find the expired holds that
-- have units at this (item, location) and lock them, so they can be released
-- now instead of waiting for the sweeper: sweeper lag never causes undersell.
-- Runs under the ledger lock, so the reservations are taken with SKIP
-- LOCKED: out of lock order, but never waiting. Holds another transaction
-- has locked are reported by in_flight. The IN subquery is a plain read
-- (no locking clause of its own); expire_ids.sql then flips what was locked.
SELECT r.shop_id, r.id
FROM reservations r
WHERE r.shop_id = ?
  AND r.status = 'held'
  AND r.expires_at <= UTC_TIMESTAMP(6)
  -- From the (few) expired holds to their rows by primary key, not from
  -- every live hold of a hot item.
  AND EXISTS (
      SELECT 1 FROM reserved_quantities q
      WHERE q.shop_id = r.shop_id AND q.reservation_id = r.id
        AND q.item_id = ? AND q.location_id = ? AND q.state = 'held')
FOR UPDATE SKIP LOCKED
