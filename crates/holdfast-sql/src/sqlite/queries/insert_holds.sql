-- Lock order step 4: a batch's holds, inserted after their units were taken,
-- in arrival order. ?2 is a JSON array of [key, fingerprint, TTL seconds];
-- every key was found free under the write lock this transaction holds, so
-- none can be taken meanwhile. Their lines follow in insert_lines.
INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
SELECT ?1, h.value ->> 0, h.value ->> 1, 'held',
       CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + (h.value ->> 2) * 1000
FROM json_each(?2) AS h
ORDER BY h.key
RETURNING id, idempotency_key, expires_at
