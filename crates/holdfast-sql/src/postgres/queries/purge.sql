-- Retention: deletes up to $2 finished reservations (claimed, released or
-- expired) that last changed more than $1 ms ago and whose every line is
-- folded into the ledger ('settled' or 'restocked'), with their lines; returns
-- how many. Deleting folded lines changes no quantity: levels, audit and the
-- fold read only the open states. SKIP LOCKED: several sweepers take
-- different rows, and a replay or claim looking at one is left alone.
WITH old AS (
    SELECT r.shop_id, r.id
    FROM reservations r
    WHERE r.status <> 'held'
      AND r.updated_at < now() - $1::float8 * interval '1 millisecond'
      AND NOT EXISTS (
          SELECT 1 FROM reserved_quantities q
          WHERE q.shop_id = r.shop_id AND q.reservation_id = r.id
            AND q.state IN ('held', 'committed', 'returned'))
    ORDER BY r.updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), lines AS (
    DELETE FROM reserved_quantities q
    USING old
    WHERE q.shop_id = old.shop_id AND q.reservation_id = old.id
), gone AS (
    DELETE FROM reservations r
    USING old
    WHERE r.shop_id = old.shop_id AND r.id = old.id
    RETURNING 1
)
SELECT count(*) FROM gone
