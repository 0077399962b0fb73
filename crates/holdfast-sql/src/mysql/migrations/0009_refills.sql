-- How often each (item, location)'s pool was refilled: written with the
-- ledger row the refill already updates (write_ledger.sql), read by the
-- console's hot items. MySQL has no ADD COLUMN IF NOT EXISTS, so a
-- procedure looks first: DDL commits implicitly and this migration may run
-- again after an interruption.
DROP PROCEDURE IF EXISTS holdfast_add_refills;
CREATE PROCEDURE holdfast_add_refills()
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = DATABASE() AND table_name = 'inventory_levels' AND column_name = 'refills'
    ) THEN
        ALTER TABLE inventory_levels ADD COLUMN refills BIGINT NOT NULL DEFAULT 0;
    END IF;
END;
CALL holdfast_add_refills();
DROP PROCEDURE holdfast_add_refills;
