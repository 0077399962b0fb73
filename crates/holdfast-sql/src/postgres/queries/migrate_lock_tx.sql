-- Migrations (migrate.rs) behind a pooler in transaction mode: serialises
-- concurrent runs like migrate_lock.sql, with a transaction-level advisory
-- lock that the migration's own commit gives back.
SELECT pg_advisory_xact_lock(7304961)
