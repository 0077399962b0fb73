-- Claim (status 'claimed', state 'committed') or release / expire (state
-- 'returned') the reservations in a JSON array of ids (locked by
-- head_for_update): flip each and its own held rows in one multi-table
-- UPDATE (no writable CTEs), driven by the list so each reservation is found
-- by primary key. A held reservation always has held rows, so the join finds
-- it. The ledger row is not touched; the next transaction that locks it folds
-- these rows in. Parameters in placeholder order: ids, shop, status, state.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
STRAIGHT_JOIN reservations r ON r.shop_id = ? AND r.id = d.id
JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id
SET r.status = ?, r.updated_at = UTC_TIMESTAMP(6), q.state = ?
WHERE q.state = 'held'
