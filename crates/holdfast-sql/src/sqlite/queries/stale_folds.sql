-- Retention's look ahead: among the ?2 oldest finished reservations that
-- changed more than ?1 ms ago, the (item, location)s whose claimed or
-- released units are not folded into the ledger yet. The sweeper refills
-- (and so folds) each, so the next purge.sql can remove them: without this,
-- an item that stopped selling would keep its last reservations for ever.
SELECT DISTINCT q.shop_id, q.item_id, q.location_id
FROM (
    SELECT r.shop_id, r.id
    FROM reservations r
    WHERE r.status <> 'held'
      AND r.updated_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
    ORDER BY r.updated_at
    LIMIT ?2
) o
JOIN reserved_quantities q ON q.shop_id = o.shop_id AND q.reservation_id = o.id
WHERE q.state IN ('committed', 'returned')
