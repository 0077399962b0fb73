-- After a reserve came up short: units of this (item, location) that are
-- still somewhere else than the ledger. Under the single write lock nothing
-- is in another transaction's hands, so this is zero unless a hold expired
-- between expire_at and now; the check stays so that "sold out" has the same
-- meaning on every backend. Plain reads.
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
     AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000 + ?4 AND r.shop_id = ?1
)
SELECT (SELECT count(*) FROM reservation_units u
        WHERE u.shop_id = ?1 AND u.item_id = ?2 AND u.location_id = ?3)
     + (SELECT count(*) FROM h)
     + (SELECT COALESCE(sum(q.quantity), 0) FROM reserved_quantities q
        WHERE q.shop_id = ?1 AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'returned') AS n,
       (SELECT count(*) FROM h WHERE h.expires_at > unixepoch('subsec') * 1000) AS soon,
       COALESCE((SELECT CAST(min(h.expires_at) - unixepoch('subsec') * 1000 AS INTEGER) + 1
                 FROM h WHERE h.expires_at > unixepoch('subsec') * 1000), 0) AS wait_ms
