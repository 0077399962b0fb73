-- Migrations (migrate.rs): the record of applied migrations.
CREATE TABLE IF NOT EXISTS holdfast_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    applied_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
) STRICT
