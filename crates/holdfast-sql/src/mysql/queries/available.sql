-- After the fast path came up short, before anything is locked: the units of
-- each candidate (item, location) that no live hold has, in one statement
-- (one consistent read, no locks): ledger, pool (rows that in-flight
-- reserves have deleted still count), units released but not yet folded,
-- and units of expired holds. When a line cannot be filled even from these,
-- the answer is `insufficient_stock` without taking the ledger lock.
-- The candidates follow as in lock_ledgers.sql.
SELECT l.item_id, l.location_id,
       CAST(l.unpooled
            + (SELECT COUNT(*) FROM reservation_units u
               WHERE u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id)
            + COALESCE((SELECT SUM(q.quantity) FROM reserved_quantities q
                        WHERE q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
                          AND q.state = 'returned'), 0)
            -- Driven by the expired holds (reservations_due), not by every
            -- live hold of the item: a hot item can have thousands.
            + COALESCE((SELECT SUM(q.quantity) FROM reservations r
                        JOIN reserved_quantities q
                          ON q.shop_id = r.shop_id AND q.reservation_id = r.id
                         AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
                        WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6) AND r.shop_id = l.shop_id), 0)
            AS SIGNED) AS available,
       -- Expiry is judged at the statement's start, before its snapshot
       -- (taken at its first read): a hold that expired between then and
       -- the time read during the statement (SYSDATE(6) is local time: UTC
       -- is the statement's start plus what has passed since) makes the
       -- row unsettled, and the caller reads again (levels.sql). No index
       -- serves a bound on SYSDATE(), so the holds are looked up within
       -- 100 ms of the start, and a statement slower than that to get here
       -- is unsettled outright.
       (TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) > 100000
        OR EXISTS (SELECT 1 FROM reservations r
                   JOIN reserved_quantities q
                     ON q.shop_id = r.shop_id AND q.reservation_id = r.id
                    AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
                   WHERE r.status = 'held' AND r.shop_id = l.shop_id
                     AND r.expires_at > UTC_TIMESTAMP(6)
                     AND r.expires_at <= UTC_TIMESTAMP(6) + INTERVAL 100000 MICROSECOND
                     AND r.expires_at <= TIMESTAMPADD(MICROSECOND, TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)),
                                                      UTC_TIMESTAMP(6)))) AS unsettled
FROM inventory_levels l
WHERE l.shop_id = ?
