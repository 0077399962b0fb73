-- Migrations (migrate.rs): serialises concurrent `holdfast migrate` runs on one
-- database. A row means the lock is held.
-- Nothing to take here: each migration's BEGIN IMMEDIATE holds the
-- database's write lock, and each checks again that it is still missing.
SELECT 1 AS locked
