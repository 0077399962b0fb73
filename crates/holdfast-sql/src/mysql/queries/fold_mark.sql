-- Mark the rows fold.sql locked (a JSON array of reservation ids) as folded:
-- claimed units 'settled', released units 'restocked'.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
STRAIGHT_JOIN reserved_quantities q
    ON q.shop_id = ? AND q.reservation_id = d.id AND q.item_id = ? AND q.location_id = ?
SET q.state = CASE q.state WHEN 'returned' THEN 'restocked' ELSE 'settled' END
WHERE q.state IN ('returned', 'committed')
