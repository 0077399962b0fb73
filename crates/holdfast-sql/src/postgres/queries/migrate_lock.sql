-- Migrations (migrate.rs): serialises concurrent `holdfast migrate` runs on one
-- database. A row means the lock is held.
-- A session-level advisory lock, given back by migrate_unlock.sql (or when
-- the connection ends).
SELECT 1 AS locked FROM (SELECT pg_advisory_lock(7304961)) AS l
