-- Under the ledger lock: lock the claimed ('committed') and released
-- ('returned') rows of this (item, location). The caller sums them into the
-- ledger row and fold_mark.sql marks exactly these rows folded. MySQL has no
-- UPDATE … RETURNING, and an UPDATE by state alone could mark a row that a
-- release committed between the two statements without counting it (READ
-- COMMITTED sees it), so the rows are named by key. Blocking FOR UPDATE, as
-- PostgreSQL's UPDATE waits: a claim or release flipping a row here commits
-- without waiting for anything this transaction holds.
SELECT q.reservation_id, q.state, q.quantity
FROM reserved_quantities q
WHERE q.shop_id = ? AND q.item_id = ? AND q.location_id = ? AND q.state IN ('returned', 'committed')
FOR UPDATE
