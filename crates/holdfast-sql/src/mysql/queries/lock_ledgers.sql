-- Lock order step 2: the ledger rows of every candidate location, all in one
-- statement, in (item_id, location_id) order. The store appends one condition
-- per candidate, `(l.item_id = ? AND l.location_id = ?)`, or `(l.item_id = ?)`
-- for every location of an item, joined with OR, then the order and the
-- locking clause (FOR UPDATE; SKIP LOCKED for a slow-path reserve; LOCK IN
-- SHARE MODE, sent alone, to wait for a refill in progress, or by a release,
-- held to its commit). The range
-- optimizer turns them into sorted primary-key ranges, and InnoDB locks rows
-- in the order it reads them, which is primary-key order: the lock order.
-- Exact ranges matter: a FOR UPDATE scan waits for every row it reads, also
-- rows it then drops.
SELECT l.item_id, l.location_id, l.on_hand, l.committed, l.unpooled
FROM inventory_levels l
WHERE l.shop_id = ?
