-- Lock order steps 3 and 4, a coalesced batch's last statement: the unit
-- rows it picked and gave away deleted ($9 items, $10 locations, $11 ids),
-- and its holds inserted in arrival order, with their lines. Per hold: $2
-- key, $3 fingerprint, $4 TTL seconds; per line: $5 its hold's key, $6 item,
-- $7 location, $8 quantity. Every key was found free just before; a plain
-- INSERT (not ON CONFLICT), so a key another transaction inserts meanwhile
-- waits for it and then fails the statement on the unique key, and the store
-- sends each request of the batch on alone.
WITH gone AS (
    DELETE FROM reservation_units d
    USING unnest($9::text[], $10::text[], $11::bigint[]) AS u (item_id, location_id, id)
    WHERE d.shop_id = $1 AND d.item_id = u.item_id AND d.location_id = u.location_id AND d.id = u.id
), r AS (
    INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
    SELECT $1, h.key, h.fingerprint, 'held', now() + h.ttl * interval '1 second'
    FROM unnest($2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS h (key, fingerprint, ttl, ord)
    ORDER BY h.ord
    RETURNING id, idempotency_key, expires_at
), q AS (
    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
    SELECT $1, r.id, a.item_id, a.location_id, a.qty, 'held'
    FROM unnest($5::text[], $6::text[], $7::text[], $8::int[]) AS a (key, item_id, location_id, qty)
    JOIN r ON r.idempotency_key = a.key
)
SELECT id, idempotency_key, expires_at FROM r
