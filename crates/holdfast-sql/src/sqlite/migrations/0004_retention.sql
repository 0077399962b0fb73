-- Retention's queue: finished reservations (claimed, released, expired) in
-- the order they finished. purge.sql repeats the WHERE term, so SQLite uses
-- this partial index.
CREATE INDEX reservations_finished ON reservations (updated_at) WHERE status <> 'held';
