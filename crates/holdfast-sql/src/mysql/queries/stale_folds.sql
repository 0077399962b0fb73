-- Retention's look ahead: among the ? oldest finished reservations that
-- changed more than ? ms ago, the (item, location)s whose claimed or
-- released units are not folded into the ledger yet. The sweeper refills
-- (and so folds) each, so the next purge.sql can remove them: without this,
-- an item that stopped selling would keep its last reservations for ever.
SELECT DISTINCT q.shop_id, q.item_id, q.location_id
FROM (
    SELECT r.shop_id, r.id
    FROM reservations r
    WHERE r.updated_at < UTC_TIMESTAMP(6) - INTERVAL (? * 1000) MICROSECOND AND r.status <> 'held'
    ORDER BY r.updated_at
    LIMIT ?
) o
JOIN reserved_quantities q ON q.shop_id = o.shop_id AND q.reservation_id = o.id
WHERE q.state IN ('committed', 'returned')
