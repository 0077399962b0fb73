-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight, and how soon holds about
-- to expire would add enough units to change the reserve's answer.
-- Plain reads, no locks. The time is the statement's, not the transaction's
-- (now()): the transaction may have waited for the ledger lock, and a hold
-- that expired meanwhile counts as available for readers already.
--
-- `n`, units in flight now: pool rows still visible here (locked by
-- transactions that may roll back), units of expired holds (in a sweeper's
-- or a claim's hands), and units released or expired but not yet folded into
-- the ledger row (this transaction folded what it saw when it first came up
-- short here; a later step of the same reserve may have returned more since).
--
-- `wait_ms`, for a reserve that will commit a hold (a partial one, or one
-- that passed over this location for a later candidate): a read after a hold
-- here expired but before the reserve's commit would count that hold's units
-- free without the reserve's hold, an order no single inventory has. So: how
-- long until holds expiring within the look-ahead ($4, in ms) bring `n` to
-- $5 units, the fewest that would change the answer here; NULL when they do
-- not within the look-ahead. The reserve must commit before then
-- (docs/design.md, "Expiry and the sweeper").
WITH h AS (
    SELECT r.expires_at, q.quantity
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= statement_timestamp() + $4 * interval '1 millisecond'
      AND r.shop_id = $1
),
now_in_flight AS (
    SELECT (SELECT count(*) FROM reservation_units u
            WHERE u.shop_id = $1 AND u.item_id = $2 AND u.location_id = $3)
         + (SELECT COALESCE(sum(h.quantity), 0) FROM h WHERE h.expires_at <= statement_timestamp())
         + (SELECT COALESCE(sum(q.quantity), 0) FROM reserved_quantities q
            WHERE q.shop_id = $1 AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'returned') AS n
),
expiring AS (
    SELECT h.expires_at, sum(h.quantity) OVER (ORDER BY h.expires_at ROWS UNBOUNDED PRECEDING) AS upto
    FROM h
    WHERE h.expires_at > statement_timestamp()
)
SELECT f.n::bigint AS n,
       (SELECT ceil(extract(epoch FROM min(e.expires_at) - statement_timestamp()) * 1000)::bigint
        FROM expiring e WHERE f.n + e.upto >= $5) AS wait_ms
FROM now_in_flight f
