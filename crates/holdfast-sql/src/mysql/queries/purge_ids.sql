-- Deletes the reservations purge.sql locked (a JSON array of {shop, id})
-- with their lines, in one multi-table DELETE driven by the list.
DELETE r, q
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         shop_id VARCHAR(64) PATH '$.shop',
         id      BIGINT PATH '$.id')) AS d
STRAIGHT_JOIN reservations r
    ON r.shop_id = CONVERT(d.shop_id USING ascii) COLLATE ascii_bin AND r.id = d.id
LEFT JOIN reserved_quantities q
    ON q.shop_id = r.shop_id AND q.reservation_id = r.id
