-- Migrations (migrate.rs): the record of applied migrations.
CREATE TABLE IF NOT EXISTS holdfast_migrations (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
