-- Lock order step 1: claim, release and extend lock the reservation rows
-- first, in id order ($2: a JSON array of ids, ascending), so two batches
-- never wait on each other in a cycle; a sweeper holding one makes them
-- wait, then see its verdict.
SELECT id, idempotency_key, fingerprint, status, expires_at, expires_at <= statement_timestamp() AS expired
FROM reservations
WHERE shop_id = $1 AND id = ANY (ARRAY(SELECT jsonb_array_elements_text($2::jsonb)::bigint))
ORDER BY id
FOR UPDATE
