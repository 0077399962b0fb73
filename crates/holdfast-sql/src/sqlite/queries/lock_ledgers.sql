-- Lock order step 2: the ledger rows of every candidate location, in
-- (item_id, location_id) order. SQLite locks the whole database, not rows:
-- BEGIN IMMEDIATE already holds the write lock, so this is a plain read, and
-- the order is the order the engine works through the rows in. $2 is a JSON
-- array of [item, location]; a null location stands for every location of
-- the item.
SELECT l.item_id, l.location_id, l.on_hand, l.committed, l.unpooled
-- candidates.sql follows.
