-- The sweeper's unit of work: expire up to $1 due holds of any shop. SKIP
-- LOCKED lets any number of sweepers (service replicas) run at once, each
-- taking different holds, and a hold a claim is working on is left to it.
WITH due AS (
    SELECT r.shop_id, r.id
    FROM reservations r
    WHERE r.status = 'held' AND r.expires_at <= now()
    ORDER BY r.expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
