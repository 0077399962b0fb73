-- After the fast path came up short, before the write lock is taken: the
-- units of each candidate (item, location) that no live hold has, read in
-- one snapshot (WAL: a reader sees the last commit and never waits for the
-- writer): ledger, pool, units released but not yet folded, and units of
-- expired holds. When a line cannot be filled even from these, the answer is
-- `insufficient_stock` without a write transaction. ?2 is a JSON array of
-- [item, location]; a null location stands for every location of the item.
SELECT l.item_id, l.location_id,
       l.unpooled
       + (SELECT count(*) FROM reservation_units u
          WHERE u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id)
       + COALESCE((SELECT sum(q.quantity) FROM reserved_quantities q
                   WHERE q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
                     AND q.state = 'returned'), 0)
       -- Driven by the expired holds (reservations_due), not by every live
       -- hold of the item.
       + COALESCE((SELECT sum(q.quantity) FROM reservations r
                   JOIN reserved_quantities q
                     ON q.shop_id = r.shop_id AND q.reservation_id = r.id
                    AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
                   WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000
                     AND r.shop_id = l.shop_id), 0)
       AS available,
       -- Expiry is judged by the statement's clock, read after its
       -- snapshot; ?3 is the caller's time before the statement. A hold that
       -- expired in between makes the row unsettled, and the caller reads
       -- again (levels.sql).
       EXISTS (SELECT 1 FROM reservations r
               JOIN reserved_quantities q
                 ON q.shop_id = r.shop_id AND q.reservation_id = r.id
                AND q.item_id = l.item_id AND q.location_id = l.location_id AND q.state = 'held'
               WHERE r.status = 'held' AND r.expires_at > ?3 AND r.expires_at <= unixepoch('subsec') * 1000
                 AND r.shop_id = l.shop_id) AS unsettled
-- candidates.sql follows.
