-- Claim ($3 = 'claimed', $4 = 'committed') or release / expire ($4 =
-- 'returned') the reservations in $2 (a JSON array of ids, locked by
-- head_for_update): flip each and its own held rows. The ledger row is not
-- touched; the next transaction that locks it folds these rows in.
WITH r AS (
    UPDATE reservations SET status = $3, updated_at = now()
    WHERE shop_id = $1 AND id = ANY (ARRAY(SELECT jsonb_array_elements_text($2::jsonb)::bigint))
    RETURNING id
)
UPDATE reserved_quantities q
SET state = $4
FROM r
WHERE q.shop_id = $1 AND q.reservation_id = r.id AND q.state = 'held'
