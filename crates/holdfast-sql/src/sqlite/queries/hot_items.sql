-- The console's hot items: per (shop, item), the units claimed by
-- reservations that finished in the last ?1 ms (reservations_finished) and
-- the units of live holds (reservations_due), busiest first, at most ?2.
-- Plain reads; bounded by recent activity, never a scan of the catalogue.
-- `status <> 'held'` repeats the partial index's predicate so it is used.
SELECT a.shop_id, a.item_id, sum(a.sold) AS sold, sum(a.held) AS held
FROM (
    SELECT q.shop_id, q.item_id, q.quantity AS sold, 0 AS held
    FROM reservations r
    JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id
    WHERE r.status <> 'held' AND r.status = 'claimed'
      AND r.updated_at >= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
    UNION ALL
    SELECT q.shop_id, q.item_id, 0, q.quantity
    FROM reservations r
    JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at > unixepoch('subsec') * 1000
) a
GROUP BY a.shop_id, a.item_id
ORDER BY sold DESC, held DESC, a.shop_id, a.item_id
LIMIT ?2
