-- Migrations (migrate.rs): serialises concurrent `holdfast migrate` runs on one
-- database. A row means the lock is held.
-- DDL cannot run in a transaction here, so a named lock: waits up to 60 s,
-- no row when it was not had. Given back by migrate_unlock.sql.
SELECT 1 AS locked FROM DUAL WHERE GET_LOCK('holdfast_migrate', 60) = 1
