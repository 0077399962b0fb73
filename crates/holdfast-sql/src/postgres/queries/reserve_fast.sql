-- Reserve, fast path, in one autocommit statement (one round trip, one
-- commit: the same cost as the single INSERT of the bench's "ceiling").
-- After pick_units.sql (each line's unit rows locked with SKIP LOCKED, as
-- for take_units.sql): only when every line got all it asked
-- for and the idempotency key is new are the rows deleted and the hold
-- inserted; otherwise nothing changes and the locks go with the statement.
-- Two requests racing with one new key: the second INSERT waits for the
-- first and fails with a unique violation, which aborts this whole
-- statement (its deletes too); the caller answers it as a replay.
-- Lock order: pool rows (SKIP LOCKED, never waits), then the hold's rows.
, got AS (
    SELECT item_id, location_id, count(*)::int AS n FROM picked GROUP BY item_id, location_id
), verdict AS (
    SELECT NOT EXISTS (
               SELECT 1 FROM want w
               LEFT JOIN got g ON g.item_id = w.item_id AND g.location_id = w.location_id
               WHERE g.n IS DISTINCT FROM w.qty
           ) AS complete,
           EXISTS (
               SELECT 1 FROM reservations
               WHERE shop_id = $1 AND idempotency_key = $5
           ) AS key_taken
), taken AS (
    DELETE FROM reservation_units d
    USING picked p, verdict v
    WHERE v.complete AND NOT v.key_taken
      AND d.shop_id = $1 AND d.item_id = p.item_id AND d.location_id = p.location_id AND d.id = p.id
), r AS (
    INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
    SELECT $1, $5, $6, 'held', now() + $7::bigint * interval '1 second'
    FROM verdict v
    WHERE v.complete AND NOT v.key_taken
    RETURNING id, expires_at
), q AS (
    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
    SELECT $1, r.id, g.item_id, g.location_id, g.n, 'held'
    FROM r, got g
)
SELECT v.complete, v.key_taken, r.id, r.expires_at, g.item_id, g.location_id, g.n
FROM verdict v
LEFT JOIN r ON true
LEFT JOIN got g ON r.id IS NOT NULL
