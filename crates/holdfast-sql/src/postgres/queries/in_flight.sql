-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight. Pool rows still visible
-- here are locked by transactions that may roll back; held rows of expired
-- holds are in a sweeper's or a claim's hands. Plain reads, no locks.
SELECT (SELECT count(*) FROM reservation_units u
        WHERE u.shop_id = $1 AND u.item_id = $2 AND u.location_id = $3)
     + (SELECT count(*) FROM reservations r
        JOIN reserved_quantities q
          ON q.shop_id = r.shop_id AND q.reservation_id = r.id
         AND q.item_id = $2 AND q.location_id = $3 AND q.state = 'held'
        WHERE r.status = 'held' AND r.expires_at <= now() AND r.shop_id = $1) AS n
