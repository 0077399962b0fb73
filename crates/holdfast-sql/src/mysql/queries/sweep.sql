-- The sweeper's unit of work: lock up to ? due holds of any shop. SKIP
-- LOCKED lets any number of sweepers (service replicas) run at once, each
-- taking different holds, and a hold a claim is working on is left to it.
-- expire_ids.sql then flips the holds this returned.
SELECT r.shop_id, r.id
FROM reservations r
WHERE r.status = 'held' AND r.expires_at <= UTC_TIMESTAMP(6)
ORDER BY r.expires_at
LIMIT ?
FOR UPDATE SKIP LOCKED
