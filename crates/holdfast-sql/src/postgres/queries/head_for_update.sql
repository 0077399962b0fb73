-- Lock order step 1: claim, release and extend lock the reservation rows
-- first, in id order ($2: a JSON array of ids, ascending), so two batches
-- never wait on each other in a cycle; a sweeper holding one makes them
-- wait, then see its verdict. Each id is one primary-key probe, locked as
-- the array is walked (in its order), whatever the table's size when the
-- plan was made (docs/design.md, "Plans").
SELECT r.id, r.idempotency_key, r.fingerprint, r.status, r.expires_at, r.expired
FROM jsonb_array_elements_text($2::jsonb) AS k (id)
CROSS JOIN LATERAL (
    SELECT id, idempotency_key, fingerprint, status, expires_at, expires_at <= statement_timestamp() AS expired
    FROM reservations
    WHERE shop_id = $1 AND id = k.id::bigint
    FOR UPDATE
) r
ORDER BY r.id
