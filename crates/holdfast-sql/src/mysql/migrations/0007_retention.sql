-- Retention's queue: reservations in the order they last changed (no partial
-- indexes here; live holds are recent and few among them). MySQL has no
-- ADD INDEX IF NOT EXISTS, so a procedure looks first: DDL commits
-- implicitly and this migration may run again after an interruption.
DROP PROCEDURE IF EXISTS holdfast_add_retention_index;
CREATE PROCEDURE holdfast_add_retention_index()
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM information_schema.statistics
        WHERE table_schema = DATABASE() AND table_name = 'reservations'
          AND index_name = 'reservations_finished'
    ) THEN
        ALTER TABLE reservations ADD INDEX reservations_finished (updated_at);
    END IF;
END;
CALL holdfast_add_retention_index();
DROP PROCEDURE holdfast_add_retention_index;
