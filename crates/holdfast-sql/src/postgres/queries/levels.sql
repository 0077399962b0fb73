-- After ledger_terms.sql: the quantities of one item per location, in one
-- statement (one snapshot). A hold past its expiry is not reserved, even
-- before a sweep releases it: its units count as available, as they do for
-- a reserve (available.sql), which may take them.
-- Expiry is judged at the statement's time, which PostgreSQL takes when
-- the Execute message arrives, after the snapshot (taken at Bind). In a
-- report's transaction (REPEATABLE READ), now() is the BEGIN's time, before
-- the snapshot, and `(SELECT clock_timestamp())`, read once during
-- execution, is after it. A hold that expired between the two makes the
-- row `unsettled`: whether it had expired at the snapshot's moment is
-- unknown, and the caller reads again. In a write transaction the column
-- means nothing. The third argument, a time from the caller's clock, is
-- for SQLite and not bound here.
SELECT location_id, on_hand,
       unpooled + returned + pooled + lapsed AS available,
       held - lapsed AS reserved,
       booked + claimed AS committed,
       unsettled > 0 AS unsettled
FROM terms
CROSS JOIN LATERAL (
    -- Driven by the expired holds (reservations_due), not by every live
    -- hold of the item.
    SELECT COALESCE(sum(q.quantity) FILTER (WHERE r.expires_at <= statement_timestamp()), 0) AS lapsed,
           count(*) FILTER (WHERE r.expires_at > now()) AS unsettled
    FROM reservations r
    JOIN reserved_quantities q
      ON q.shop_id = r.shop_id AND q.reservation_id = r.id
     AND q.item_id = terms.item_id AND q.location_id = terms.location_id AND q.state = 'held'
    WHERE r.status = 'held' AND r.expires_at <= (SELECT clock_timestamp()) AND r.shop_id = terms.shop_id
) x
WHERE shop_id = $1 AND item_id = $2
ORDER BY location_id
