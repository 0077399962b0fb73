-- Retention: deletes up to ?2 finished reservations (claimed, released or
-- expired) that last changed more than ?1 ms ago and whose every line is
-- folded into the ledger ('settled' or 'restocked'), oldest first; the ids
-- come back so purge_lines.sql removes their lines in the same transaction.
-- Sweepers in other processes queue on the write lock.
DELETE FROM reservations
WHERE id IN (
    SELECT r.id FROM reservations r
    WHERE r.status <> 'held'
      AND r.updated_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
      AND NOT EXISTS (
          SELECT 1 FROM reserved_quantities q
          WHERE q.shop_id = r.shop_id AND q.reservation_id = r.id
            AND q.state IN ('held', 'committed', 'returned'))
    ORDER BY r.updated_at
    LIMIT ?2)
RETURNING shop_id, id
