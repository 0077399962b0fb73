-- Expire the holds expire_at.sql or sweep.sql locked (a JSON array of
-- {shop, id}): the reservation becomes 'expired', its held units 'returned'.
-- MySQL has no writable CTEs, so this is one multi-table UPDATE, driven by
-- the JSON list (STRAIGHT_JOIN) so each reservation is found by primary key.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
           shop_id VARCHAR(64) PATH '$.shop',
           id      BIGINT PATH '$.id')) AS d
STRAIGHT_JOIN reservations r
    ON r.shop_id = CONVERT(d.shop_id USING ascii) COLLATE ascii_bin AND r.id = d.id
JOIN reserved_quantities q
    ON q.shop_id = r.shop_id AND q.reservation_id = r.id
SET r.status = 'expired', r.updated_at = UTC_TIMESTAMP(6), q.state = 'returned'
WHERE r.status = 'held' AND q.state = 'held'
