-- Migrations (migrate.rs): gives back the lock of migrate_lock.sql.
SELECT pg_advisory_unlock(7304961)
