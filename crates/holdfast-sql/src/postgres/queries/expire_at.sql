-- Reserve came up short (or a stock change): release the expired holds that
-- have units at this (item, location) now instead of waiting for the sweeper,
-- so sweeper lag never causes undersell. Runs under the ledger lock, so the
-- reservations are taken with SKIP LOCKED: out of lock order, but never
-- waiting. Holds another transaction has locked are reported by in_flight.
-- The statement's time, as in in_flight.sql.
WITH due AS (
    SELECT r.shop_id, r.id
    FROM reservations r
    WHERE r.shop_id = $1
      AND r.status = 'held'
      AND r.expires_at <= statement_timestamp()
      -- From the (few) expired holds to their rows by primary key, not
      -- from every live hold of a hot item.
      AND EXISTS (
          SELECT 1 FROM reserved_quantities q
          WHERE q.shop_id = r.shop_id AND q.reservation_id = r.id
            AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'held')
    FOR UPDATE SKIP LOCKED
