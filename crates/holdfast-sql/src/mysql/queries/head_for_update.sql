-- Lock order step 1: claim, release and extend lock the reservation rows
-- first. The JSON array of ids (ascending) drives the join, so the rows are
-- locked in id order and two batches never wait on each other in a cycle; a
-- sweeper holding one makes them wait, then see its verdict (READ
-- COMMITTED: the locking read returns the latest committed version).
-- Parameters in placeholder order: ids, shop.
SELECT r.id, r.idempotency_key, r.fingerprint, r.status, r.expires_at,
       r.expires_at <= UTC_TIMESTAMP(6) AS expired
FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
STRAIGHT_JOIN reservations r ON r.shop_id = ? AND r.id = d.id
ORDER BY r.id
FOR UPDATE
