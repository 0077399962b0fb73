-- The terms of the accounting invariant for every (shop, item, location) of
-- one shop, or of all when ?1 is NULL, read in one deferred transaction:
-- under WAL that is one snapshot, however long the audit takes. Pool rows and
-- held quantities are grouped once per (shop, item, location); the FULL JOIN
-- keeps groups that no ledger row accounts for (orphans). The store adds the
-- terms up (run.rs, audit_row).
WITH pooled AS (
    SELECT shop_id, item_id, location_id, count(*) AS n
    FROM reservation_units
    WHERE ?1 IS NULL OR shop_id = ?1
    GROUP BY shop_id, item_id, location_id
), holds AS (
    SELECT shop_id, item_id, location_id,
           total(CASE state WHEN 'held' THEN quantity END) AS held,
           total(CASE state WHEN 'committed' THEN quantity END) AS claimed,
           total(CASE state WHEN 'returned' THEN quantity END) AS returned
    FROM reserved_quantities
    WHERE state IN ('held', 'committed', 'returned') AND (?1 IS NULL OR shop_id = ?1)
    GROUP BY shop_id, item_id, location_id
), units AS (
    SELECT COALESCE(p.shop_id, h.shop_id) AS shop_id, COALESCE(p.item_id, h.item_id) AS item_id,
           COALESCE(p.location_id, h.location_id) AS location_id,
           COALESCE(p.n, 0) AS pooled, COALESCE(h.held, 0) AS held,
           COALESCE(h.claimed, 0) AS claimed, COALESCE(h.returned, 0) AS returned
    FROM pooled p
    FULL JOIN holds h ON h.shop_id = p.shop_id AND h.item_id = p.item_id AND h.location_id = p.location_id
)
SELECT COALESCE(l.shop_id, u.shop_id) AS shop_id, COALESCE(l.item_id, u.item_id) AS item_id,
       COALESCE(l.location_id, u.location_id) AS location_id, l.shop_id IS NULL AS orphan,
       COALESCE(l.on_hand, 0) AS on_hand, COALESCE(l.unpooled, 0) AS unpooled, COALESCE(l.committed, 0) AS booked,
       COALESCE(u.pooled, 0) AS pooled, CAST(COALESCE(u.held, 0) AS INTEGER) AS held,
       CAST(COALESCE(u.claimed, 0) AS INTEGER) AS claimed, CAST(COALESCE(u.returned, 0) AS INTEGER) AS returned
FROM (SELECT * FROM inventory_levels WHERE ?1 IS NULL OR shop_id = ?1) l
FULL JOIN units u ON u.shop_id = l.shop_id AND u.item_id = l.item_id AND u.location_id = l.location_id
ORDER BY 1, 2, 3
