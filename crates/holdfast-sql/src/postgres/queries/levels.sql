-- After ledger_terms.sql: the quantities of one item per location, in one
-- statement (one snapshot). A hold past its expiry is not reserved, even
-- before a sweep releases it: its units count as available, as they do for
-- a reserve (available.sql), which may take them.
SELECT location_id, on_hand,
       unpooled + returned + pooled + lapsed AS available,
       held - lapsed AS reserved,
       booked + claimed AS committed
FROM terms
CROSS JOIN LATERAL (
    -- Driven by the expired holds (reservations_due), not by every live
    -- hold of the item.
    SELECT COALESCE(sum(q.quantity), 0) AS lapsed
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = terms.item_id AND q.location_id = terms.location_id AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= statement_timestamp() AND r.shop_id = terms.shop_id
) x
WHERE shop_id = $1 AND item_id = $2
ORDER BY location_id
