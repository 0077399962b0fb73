-- After a reserve came up short: units of this (item, location) that are
-- still somewhere else than the ledger (`n`), and how soon holds about to
-- expire would add enough units to change the reserve's answer (`wait_ms`),
-- as postgres/queries/in_flight.sql explains. Under the single write lock
-- nothing is in another transaction's hands, so `n` is zero unless a hold
-- expired between expire_at and now; the check stays so that "sold out" has
-- the same meaning on every backend. Plain reads. ?4 is the look-ahead in
-- ms, ?5 the units that would change the answer.
WITH h AS (
    SELECT r.expires_at, q.quantity
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000 + ?4 AND r.shop_id = ?1
),
now_in_flight AS (
    SELECT (SELECT count(*) FROM reservation_units u
            WHERE u.shop_id = ?1 AND u.item_id = ?2 AND u.location_id = ?3)
         + (SELECT COALESCE(sum(h.quantity), 0) FROM h WHERE h.expires_at <= unixepoch('subsec') * 1000)
         + (SELECT COALESCE(sum(q.quantity), 0) FROM reserved_quantities q
            WHERE q.shop_id = ?1 AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'returned') AS n
),
expiring AS (
    SELECT h.expires_at, sum(h.quantity) OVER (ORDER BY h.expires_at ROWS UNBOUNDED PRECEDING) AS upto
    FROM h
    WHERE h.expires_at > unixepoch('subsec') * 1000
)
SELECT f.n AS n,
       (SELECT CAST(min(e.expires_at) - unixepoch('subsec') * 1000 AS INTEGER) + 1
        FROM expiring e WHERE f.n + e.upto >= ?5) AS wait_ms
FROM now_in_flight f
