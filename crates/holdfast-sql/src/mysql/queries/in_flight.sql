-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight. Pool rows still visible
-- here are locked by transactions that may roll back; held rows of expired
-- holds are in a sweeper's or a claim's hands. Plain reads, no locks.
-- Units released or expired but not folded into the ledger row are in
-- flight too: this transaction folded what it saw when it first came up short
-- here, and a later step of the same reserve (the expiry of a hold with units
-- at another of its lines' locations) may have returned more since.
-- Holds that expire within the next margin (the last argument, in ms) count
-- as well. A reserve that will commit a hold (a partial one, or one that
-- passed over this location for a later candidate) commits a little after it
-- looks, and were a hold here to expire in between, a read in between would
-- count that hold's units as free without the reserve's hold, an order no
-- single inventory has; such a reserve looks with a margin and starts over
-- until the hold has expired. A refusal commits nothing: it needs none.
-- `soon` counts the holds of the margin that have not expired yet, and
-- `wait_ms` is how long until the first of them does: when they are all
-- that is in flight, the reserve waits that long, holding nothing, instead
-- of starting over again and again (and taking the item's ledger lock each
-- time) until it has expired.
WITH h AS (
    SELECT r.expires_at
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = ? AND q.location_id = ? AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND AND r.shop_id = ?
)
SELECT (SELECT COUNT(*) FROM reservation_units u
        WHERE u.shop_id = ? AND u.item_id = ? AND u.location_id = ?)
     + (SELECT COUNT(*) FROM h)
     + CAST((SELECT COALESCE(SUM(q.quantity), 0) FROM reserved_quantities q
             WHERE q.shop_id = ? AND q.item_id = ? AND q.location_id = ? AND q.state = 'returned') AS SIGNED) AS n,
       (SELECT COUNT(*) FROM h WHERE h.expires_at > UTC_TIMESTAMP(6)) AS soon,
       CAST(COALESCE((SELECT CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(h.expires_at)) / 1000)
                      FROM h WHERE h.expires_at > UTC_TIMESTAMP(6)), 0) AS SIGNED) AS wait_ms
