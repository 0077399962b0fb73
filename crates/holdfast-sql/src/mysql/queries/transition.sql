-- Claim (status 'claimed', state 'committed') or release / expire (state
-- 'returned'): flip the reservation and its own held rows in one
-- multi-table UPDATE (no writable CTEs). A held reservation always has held
-- rows, so the join finds it. The ledger row is not touched; the next
-- transaction that locks it folds these rows in.
UPDATE reservations r
JOIN reserved_quantities q ON q.shop_id = r.shop_id AND q.reservation_id = r.id
SET r.status = ?, r.updated_at = UTC_TIMESTAMP(6), q.state = ?
WHERE r.shop_id = ? AND r.id = ? AND q.state = 'held'
