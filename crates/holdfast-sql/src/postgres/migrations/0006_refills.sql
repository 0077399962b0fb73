-- How often each (item, location)'s pool was refilled: written with the
-- ledger row the refill already updates (write_ledger.sql), read by the
-- console's hot items. Adding a column with a constant default rewrites
-- nothing.
ALTER TABLE inventory_levels ADD COLUMN IF NOT EXISTS refills bigint NOT NULL DEFAULT 0;
