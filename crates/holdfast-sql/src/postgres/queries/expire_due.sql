-- The end of expire_at.sql and sweep.sql, after their `due` holds (locked
-- with SKIP LOCKED): each becomes 'expired' and its held units 'returned'.
-- Returns them (shop_id, id).
), gone AS (
    UPDATE reservations r
    SET status = 'expired', updated_at = now()
    FROM due
    WHERE r.shop_id = due.shop_id AND r.id = due.id
    RETURNING r.shop_id, r.id
), back AS (
    UPDATE reserved_quantities q
    SET state = 'returned'
    FROM gone
    WHERE q.shop_id = gone.shop_id AND q.reservation_id = gone.id AND q.state = 'held'
)
SELECT shop_id, id FROM gone
