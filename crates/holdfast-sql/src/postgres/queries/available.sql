-- After the fast path came up short, before anything is locked: the units of
-- each candidate (item, location) that no live hold has, in one snapshot:
-- ledger, pool (rows that in-flight reserves have deleted still count), units
-- released but not yet folded, and units of expired holds. When a line cannot
-- be filled even from these, the answer is `insufficient_stock` without taking
-- the ledger lock: at this snapshot no more units were unreserved.
SELECT l.item_id, l.location_id,
       l.unpooled
       + (SELECT count(*) FROM reservation_units u
          WHERE u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id)
       + COALESCE((SELECT sum(q.quantity) FROM reserved_quantities q
                   WHERE q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
                     AND q.state = 'returned'), 0)
       -- Driven by the expired holds (reservations_due), not by every live
       -- hold of the item: a hot item can have thousands of live holds.
       + COALESCE((SELECT sum(q.quantity) FROM reservations r
                   JOIN reserved_quantities q
                     ON q.shop_id = r.shop_id AND q.reservation_id = r.id
                    AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
                   WHERE r.status = 'held' AND r.expires_at <= statement_timestamp() AND r.shop_id = l.shop_id), 0)
       AS available,
       -- Expiry is judged at Execute, after the snapshot (taken at Bind):
       -- a hold that expired between the statement's implicit BEGIN (now(),
       -- before the snapshot) and `(SELECT clock_timestamp())` (after it)
       -- makes the row unsettled, and the caller reads again (levels.sql).
       EXISTS (SELECT 1 FROM reservations r
           JOIN reserved_quantities q
             ON q.shop_id = r.shop_id AND q.reservation_id = r.id
            AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
               WHERE r.status = 'held' AND r.expires_at > now() AND r.expires_at <= (SELECT clock_timestamp())
                 AND r.shop_id = l.shop_id) AS unsettled
-- candidates.sql follows.
