-- After a reserve came up short under the ledger lock: units of this (item,
-- location) that other transactions have in flight. Pool rows still visible
-- here are locked by transactions that may roll back; held rows of expired
-- holds are in a sweeper's or a claim's hands. Plain reads, no locks.
SELECT (SELECT COUNT(*) FROM reservation_units u
        WHERE u.shop_id = ? AND u.item_id = ? AND u.location_id = ?)
     + (SELECT COUNT(*) FROM reservations r
        JOIN reserved_quantities q
          ON q.shop_id = r.shop_id AND q.reservation_id = r.id
         AND q.item_id = ? AND q.location_id = ? AND q.state = 'held'
        WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6) AND r.shop_id = ?) AS n
