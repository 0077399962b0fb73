-- Lock order step 4: the hold is inserted after its units were taken. A key
-- already used in this shop inserts nothing: INSERT IGNORE waits for a
-- concurrent insert of the same key to finish (shared lock on the duplicate
-- entry), then inserts nothing (0 rows affected), like PostgreSQL's ON
-- CONFLICT DO NOTHING. IGNORE would also turn bad values into warnings, but
-- every value here was validated before it reached the store.
-- insert_lines.sql follows; the id is the connection's last insert id.
INSERT IGNORE INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
VALUES (?, ?, ?, 'held', UTC_TIMESTAMP(6) + INTERVAL ? SECOND)
