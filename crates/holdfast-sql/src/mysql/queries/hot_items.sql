-- The console's hot items: per (shop, item), the units claimed by
-- reservations that finished in the last ? ms (reservations_finished) and
-- the units of live holds (reservations_due), busiest first, at most ?.
-- Plain reads; bounded by recent activity, never a scan of the catalogue.
SELECT a.shop_id, a.item_id, CAST(SUM(a.sold) AS SIGNED) AS sold, CAST(SUM(a.held) AS SIGNED) AS held
FROM (
    SELECT q.shop_id, q.item_id, q.quantity AS sold, 0 AS held
    FROM reservations r
    JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id
    WHERE r.updated_at >= UTC_TIMESTAMP(6) - INTERVAL (? * 1000) MICROSECOND AND r.status = 'claimed'
    UNION ALL
    SELECT q.shop_id, q.item_id, 0, q.quantity
    FROM reservations r
    JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at > UTC_TIMESTAMP(6)
) a
GROUP BY a.shop_id, a.item_id
ORDER BY sold DESC, held DESC, a.shop_id, a.item_id
LIMIT ?
