-- Lock order step 4: the hold is inserted after its units were taken. A key
-- already used in this shop inserts nothing (ON CONFLICT waits for a
-- concurrent insert of the same key to finish, then yields no row).
WITH r AS (
    INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
    VALUES ($1, $2, $3, 'held', now() + $4::bigint * interval '1 second')
    ON CONFLICT (shop_id, idempotency_key) DO NOTHING
    RETURNING id, expires_at
), q AS (
    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
    SELECT $1, r.id, a.item_id, a.location_id, a.qty, 'held'
    FROM r, unnest($5::text[], $6::text[], $7::int[]) AS a (item_id, location_id, qty)
)
SELECT id, expires_at FROM r
