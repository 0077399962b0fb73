-- Retention: locks up to ? finished reservations (claimed, released or
-- expired) that last changed more than ? ms ago and whose every line is
-- folded into the ledger ('settled' or 'restocked'); purge_ids.sql deletes
-- them with their lines. SKIP LOCKED: several sweepers take different rows,
-- and a replay or claim looking at one is left alone.
SELECT r.shop_id, r.id
FROM reservations r
WHERE r.updated_at < UTC_TIMESTAMP(6) - INTERVAL (? * 1000) MICROSECOND
  AND r.status <> 'held'
  AND NOT EXISTS (
      SELECT 1 FROM reserved_quantities q
      WHERE q.shop_id = r.shop_id AND q.reservation_id = r.id
        AND q.state IN ('held', 'committed', 'returned'))
ORDER BY r.updated_at
LIMIT ?
FOR UPDATE SKIP LOCKED
