-- Migrations (migrate.rs): records a migration as applied (version, name).
INSERT INTO holdfast_migrations (version, name) VALUES ($1, $2)
