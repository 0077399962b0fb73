-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight. Pool rows still visible
-- here are locked by transactions that may roll back; held rows of expired
-- holds are in a sweeper's or a claim's hands. Plain reads, no locks. The
-- time is the statement's, not the transaction's (now()): the transaction
-- may have waited for the ledger lock, and a hold that expired meanwhile
-- counts as available for readers already.
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
     AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= statement_timestamp() + $4 * interval '1 millisecond'
      AND r.shop_id = $1
)
SELECT (SELECT count(*) FROM reservation_units u
        WHERE u.shop_id = $1 AND u.item_id = $2 AND u.location_id = $3)
     + (SELECT count(*) FROM h)
     + (SELECT COALESCE(sum(q.quantity), 0) FROM reserved_quantities q
        WHERE q.shop_id = $1 AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'returned') AS n,
       (SELECT count(*) FROM h WHERE h.expires_at > statement_timestamp()) AS soon,
       (SELECT COALESCE(ceil(extract(epoch FROM min(h.expires_at) - statement_timestamp()) * 1000), 0)::bigint
        FROM h WHERE h.expires_at > statement_timestamp()) AS wait_ms
