-- How often each (item, location)'s pool was refilled: written with the
-- ledger row the refill already updates (write_ledger.sql), read by the
-- console's hot items.
ALTER TABLE inventory_levels ADD COLUMN refills INTEGER NOT NULL DEFAULT 0;
