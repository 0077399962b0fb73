-- Migrations (migrate.rs): gives back the lock of migrate_lock.sql.
SELECT 1
