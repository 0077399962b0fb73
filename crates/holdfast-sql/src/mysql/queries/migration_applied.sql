-- Migrations (migrate.rs): a row when this version is applied (version).
SELECT 1 AS applied FROM holdfast_migrations WHERE version = ?
