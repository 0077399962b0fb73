-- The start of levels.sql and audit.sql: every ledger row with its pool rows
-- and the quantities of its holds by state, each summed by a LATERAL
-- subquery over that row's own index range. Plain reads, never SKIP LOCKED,
-- which would hide rows that other transactions lock. The CTE is inlined, so
-- the statement's filter reaches the scan of inventory_levels.
WITH terms AS (
    SELECT l.shop_id, l.item_id, l.location_id, l.on_hand, l.unpooled, l.committed AS booked,
           p.n AS pooled, q.held, q.claimed, q.returned
    FROM inventory_levels l
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM reservation_units u
        WHERE u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id
    ) p
    CROSS JOIN LATERAL (
        SELECT COALESCE(sum(quantity) FILTER (WHERE state = 'held'), 0) AS held,
               COALESCE(sum(quantity) FILTER (WHERE state = 'committed'), 0) AS claimed,
               COALESCE(sum(quantity) FILTER (WHERE state = 'returned'), 0) AS returned
        FROM reserved_quantities q
        WHERE q.shop_id = l.shop_id AND q.item_id = l.item_id AND q.location_id = l.location_id
          AND q.state IN ('held', 'committed', 'returned')
    ) q
)
