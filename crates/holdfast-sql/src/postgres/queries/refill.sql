-- Replenish, under the ledger lock (so one transaction refills an (item,
-- location) at a time): insert up to $5 unit rows into free slots 0..$4-1.
-- A slot whose row another transaction deleted but has not committed still
-- looks taken, so this never waits on it.
INSERT INTO reservation_units (shop_id, item_id, location_id, id)
SELECT $1, $2, $3, s.id
FROM generate_series(0, $4 - 1) AS s (id)
WHERE NOT EXISTS (
    SELECT 1 FROM reservation_units u
    WHERE u.shop_id = $1 AND u.item_id = $2 AND u.location_id = $3 AND u.id = s.id)
ORDER BY s.id
LIMIT $5
ON CONFLICT DO NOTHING
