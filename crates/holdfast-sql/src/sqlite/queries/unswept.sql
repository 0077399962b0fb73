-- The sweeper's backlog, for its metrics: holds still 'held' past their
-- expiry (counted up to 10000) and when the oldest of them expired. A range
-- of the reservations_due index, empty while the sweepers keep up.
SELECT count(*) AS holds, min(due.expires_at) AS oldest
FROM (
    SELECT r.expires_at
    FROM reservations r
    WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000
    ORDER BY r.expires_at
    LIMIT 10000
) due
