-- Retention's queue: finished reservations (claimed, released, expired) in
-- the order they finished, so a pass reads the oldest first and stops after
-- its batch. Live holds stay out of it (they have reservations_due).
CREATE INDEX reservations_finished ON reservations (updated_at) WHERE status <> 'held';
