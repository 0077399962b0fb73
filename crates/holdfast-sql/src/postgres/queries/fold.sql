-- Under the ledger lock: mark claimed units 'settled' and released units
-- 'restocked' and return their sums, which the caller adds to the ledger row's
-- committed and unpooled. Claims and releases only flip their own rows; this
-- is where their units reach the ledger, one transaction at a time.
WITH f AS (
    UPDATE reserved_quantities
    SET state = CASE state WHEN 'returned' THEN 'restocked' ELSE 'settled' END
    WHERE shop_id = $1 AND item_id = $2 AND location_id = $3 AND state IN ('returned', 'committed')
    RETURNING state, quantity
)
SELECT COALESCE(sum(quantity) FILTER (WHERE state = 'restocked'), 0)::bigint AS restocked,
       COALESCE(sum(quantity) FILTER (WHERE state = 'settled'), 0)::bigint AS settled
FROM f
