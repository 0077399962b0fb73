-- Reserve, fast path and slow path: ONE BRANCH of the cart's take. The store
-- joins one copy per wanted (item, location) with UNION ALL and sends the
-- whole cart as one statement, one round trip. Each branch is parenthesised
-- with its own LIMIT and FOR UPDATE SKIP LOCKED: concurrent buyers of a hot
-- item take different rows instead of queueing on one. MariaDB 10.11 accepts
-- a locking clause inside each parenthesised UNION branch and honours it per
-- branch (rows other transactions hold are skipped, the rows returned are
-- X-locked, "rec but not gap"); MySQL 8 documents the same.
-- A NULL location means the first location, in location_id order, that
-- stocks the item. The subquery on inventory_levels is a plain read: neither
-- server locks rows of a nested subquery without its own locking clause, so
-- the take never touches the ledger lock.
-- Runs at READ COMMITTED: under REPEATABLE READ an empty range would take a
-- gap lock up to the next record that blocks the refill's inserts.
-- Lock order: pool rows, SKIP LOCKED (never waits).
(SELECT ru.item_id, ru.location_id, ru.id
 FROM reservation_units ru
 WHERE ru.shop_id = ? AND ru.item_id = ?
   AND ru.location_id = COALESCE(?, (
       SELECT MIN(l.location_id) FROM inventory_levels l
       WHERE l.shop_id = ? AND l.item_id = ?))
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
