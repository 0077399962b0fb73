-- Migrations (migrate.rs): the record of applied migrations.
CREATE TABLE IF NOT EXISTS holdfast_migrations (
    version INT PRIMARY KEY, name VARCHAR(64) NOT NULL,
    applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB
