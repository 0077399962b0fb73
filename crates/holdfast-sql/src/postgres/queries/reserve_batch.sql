-- Reserve, a coalesced batch's fast path, in one autocommit statement: the
-- fast path of reserve_fast.sql for every request of the batch at once, one
-- round trip and one commit for the lot. $1 shop; per cart line: $2 its
-- request (1, 2, … in arrival order), $3 item, $4 location (NULL: the first
-- that stocks the item), $5 quantity; per request: $6 key, $7 fingerprint,
-- $8 TTL in seconds.
--
-- Each (item, location) the batch wants is locked once, as many free rows as
-- the whole batch wants, with SKIP LOCKED (a statement does not skip rows it
-- locked itself, so two requests must never pick separately). The rows are
-- then dealt out in arrival order: each line gets the next `qty` rows of its
-- (item, location), and a request holds only when every one of its lines got
-- all it asked for and its key is new. A request that does not (`fits` false,
-- or its key taken) changes nothing: its rows stay in the pool and the store
-- runs it alone afterwards. Dealing in order means no request takes a unit
-- an earlier request of the batch could have had; a later request may be
-- sent on alone for rows an earlier request counted and did not take, which
-- costs time, never a unit.
--
-- Lock order: pool rows (SKIP LOCKED, never waits), then the holds' rows.
WITH line AS (
    SELECT w.req, w.ord, w.item_id,
           COALESCE(w.location_id, (
               SELECT l.location_id FROM inventory_levels l
               WHERE l.shop_id = $1 AND l.item_id = w.item_id
               ORDER BY l.location_id LIMIT 1)) AS location_id,
           w.qty
    FROM unnest($2::int[], $3::text[], $4::text[], $5::int[]) WITH ORDINALITY AS w (req, item_id, location_id, qty, ord)
), want AS (
    SELECT item_id, location_id, sum(qty)::int AS total FROM line GROUP BY item_id, location_id
), picked AS (
    SELECT u.item_id, u.location_id, u.row,
           row_number() OVER (PARTITION BY u.item_id, u.location_id ORDER BY u.id) AS rank
    FROM want CROSS JOIN LATERAL (
        SELECT ru.item_id, ru.location_id, ru.id, ru.ctid AS row
        FROM reservation_units ru
        WHERE ru.shop_id = $1 AND ru.item_id = want.item_id AND ru.location_id = want.location_id
        LIMIT want.total
        FOR UPDATE SKIP LOCKED
    ) AS u
), got AS (
    SELECT item_id, location_id, count(*) AS n FROM picked GROUP BY item_id, location_id
), placed AS (
    SELECT line.*, sum(line.qty) OVER (PARTITION BY line.item_id, line.location_id ORDER BY line.req, line.ord) AS upto
    FROM line
), fits AS (
    SELECT p.req, bool_and(p.upto <= COALESCE(g.n, 0)) AS ok
    FROM placed p
    LEFT JOIN got g ON g.item_id = p.item_id AND g.location_id = p.location_id
    GROUP BY p.req
), asked AS (
    SELECT a.req, a.key, a.fingerprint, a.ttl
    FROM unnest($6::text[], $7::text[], $8::bigint[]) WITH ORDINALITY AS a (key, fingerprint, ttl, req)
), fresh AS (
    -- Keys not used in this shop yet. A plain INSERT, not ON CONFLICT (whose
    -- speculative insertion costs more per row): a key another transaction
    -- inserts meanwhile fails the whole statement on the unique key, and the
    -- store sends each request of the batch on alone.
    SELECT a.* FROM asked a
    JOIN fits f ON f.req = a.req AND f.ok
    WHERE NOT EXISTS (SELECT 1 FROM reservations x WHERE x.shop_id = $1 AND x.idempotency_key = a.key)
), r AS (
    INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
    SELECT $1, a.key, a.fingerprint, 'held', now() + a.ttl * interval '1 second'
    FROM fresh a
    ORDER BY a.req
    RETURNING id, idempotency_key, expires_at
), held AS (
    SELECT a.req, r.id, r.expires_at FROM r JOIN fresh a ON a.key = r.idempotency_key
), taken AS (
    DELETE FROM reservation_units d
    USING held h, placed p, picked k
    WHERE p.req = h.req AND k.item_id = p.item_id AND k.location_id = p.location_id
      AND k.rank > p.upto - p.qty AND k.rank <= p.upto
      -- By the row's address: it is locked, so it cannot move, and a TID
      -- lookup is one heap fetch where the key would scan the pool's range.
      AND d.ctid = k.row
), q AS (
    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
    SELECT $1, h.id, p.item_id, p.location_id, p.qty, 'held'
    FROM held h
    JOIN placed p ON p.req = h.req
)
SELECT p.req, p.item_id, p.location_id, p.qty AS n, f.ok AS fits, h.id, h.expires_at
FROM placed p
JOIN fits f ON f.req = p.req
LEFT JOIN held h ON h.req = p.req
ORDER BY p.req, p.ord
