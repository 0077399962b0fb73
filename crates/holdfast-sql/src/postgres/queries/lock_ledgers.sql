-- Lock order step 2: the ledger rows of every candidate location, all in one
-- statement, in (item_id, location_id) order (LockRows runs above the Sort, so
-- rows are locked in the order they are returned). A NULL location stands for
-- every location of the item. candidates.sql follows, then the locking
-- clause: FOR UPDATE; FOR UPDATE SKIP LOCKED for a slow-path reserve, which
-- waits for a refill in progress holding nothing instead; FOR KEY SHARE, the
-- weakest lock, sent alone to wait for that refill and hold nothing after, or
-- by a release, held to its commit so no reserve's decision straddles it.
SELECT l.item_id, l.location_id, l.on_hand, l.committed, l.unpooled
