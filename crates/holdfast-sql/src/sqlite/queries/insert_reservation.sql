-- Lock order step 4: the hold is inserted after its units were taken. A key
-- already used in this shop inserts nothing and returns no row; under the
-- write lock there is no concurrent insert of the same key to wait for. Its
-- lines follow in insert_lines (SQLite has no data-modifying CTEs).
INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
VALUES (?1, ?2, ?3, 'held', CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?4 * 1000)
ON CONFLICT (shop_id, idempotency_key) DO NOTHING
RETURNING id, expires_at
