-- The holds of a batch's idempotency keys in one shop: which keys are used
-- already (before a batch inserts its holds) and the new holds' ids and
-- expiries (after; MySQL has no INSERT … RETURNING). The JSON array of keys
-- drives the join (STRAIGHT_JOIN) so each is found on the unique key;
-- CONVERT … COLLATE gives the JSON text the column's collation. Parameters
-- in placeholder order: keys, shop.
SELECT r.id, r.idempotency_key, r.expires_at
FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$')) AS d
STRAIGHT_JOIN reservations r
    ON r.shop_id = ? AND r.idempotency_key = CONVERT(d.k USING ascii) COLLATE ascii_bin
