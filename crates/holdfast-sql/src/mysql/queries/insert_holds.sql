-- Lock order step 4: a batch's holds, inserted after their units were
-- taken, in arrival order, from a JSON array of {key, fp, ttl}. Every key
-- was found free just before; a plain INSERT (not IGNORE), so a key another
-- transaction inserts meanwhile waits for it and then fails the statement
-- with a duplicate key, and the store sends each request of the batch on
-- alone. Parameters in placeholder order: shop, holds.
INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
SELECT ?, CONVERT(h.k USING ascii) COLLATE ascii_bin, h.fp, 'held', UTC_TIMESTAMP(6) + INTERVAL h.ttl SECOND
FROM JSON_TABLE(?, '$[*]' COLUMNS (
         ord FOR ORDINALITY,
         k   VARCHAR(128) PATH '$.key',
         fp  LONGTEXT PATH '$.fp',
         ttl INT PATH '$.ttl')) AS h
ORDER BY h.ord
