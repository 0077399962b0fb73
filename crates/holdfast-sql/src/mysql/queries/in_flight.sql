-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight (`n`), and how soon holds
-- about to expire would add enough units to change the reserve's answer
-- (`wait_ms`), as postgres/queries/in_flight.sql explains. Plain reads, no
-- locks. Parameters in placeholder order: item, location, look-ahead (ms),
-- shop; shop, item, location; shop, item, location; units that matter.
WITH h AS (
    SELECT r.expires_at, q.quantity
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = ? AND q.location_id = ? AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND AND r.shop_id = ?
),
now_in_flight AS (
    SELECT (SELECT COUNT(*) FROM reservation_units u
            WHERE u.shop_id = ? AND u.item_id = ? AND u.location_id = ?)
         + (SELECT COALESCE(SUM(h.quantity), 0) FROM h WHERE h.expires_at <= UTC_TIMESTAMP(6))
         + (SELECT COALESCE(SUM(q.quantity), 0) FROM reserved_quantities q
            WHERE q.shop_id = ? AND q.item_id = ? AND q.location_id = ? AND q.state = 'returned') AS n
),
expiring AS (
    SELECT h.expires_at, SUM(h.quantity) OVER (ORDER BY h.expires_at ROWS UNBOUNDED PRECEDING) AS upto
    FROM h
    WHERE h.expires_at > UTC_TIMESTAMP(6)
)
SELECT CAST(f.n AS SIGNED) AS n,
       (SELECT CAST(CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(e.expires_at)) / 1000) AS SIGNED)
        FROM expiring e WHERE f.n + e.upto >= ?) AS wait_ms
FROM now_in_flight f
