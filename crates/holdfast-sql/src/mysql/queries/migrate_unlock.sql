-- Migrations (migrate.rs): gives back the lock of migrate_lock.sql.
SELECT RELEASE_LOCK('holdfast_migrate')
