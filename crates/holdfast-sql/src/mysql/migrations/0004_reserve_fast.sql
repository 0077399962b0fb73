-- The reserve fast path as one stored procedure: one round trip (CALL)
-- instead of seven (BEGIN, take, delete, insert the hold, insert its lines,
-- read its expiry, COMMIT), each of which a client in another rack pays in
-- latency while holding pool rows. The same steps and lock order as the
-- transaction form in the engine: pool rows of each line with SKIP LOCKED
-- (never waits), then the hold's rows. Nothing else lives in the database:
-- the slow path, refills and the rest stay in the engine.
--
-- p_wants: JSON array of {"item", "location" (null: the first location, in
-- location_id order, that stocks the item), "qty"}, items unique.
-- Answers one row: complete, key_taken, id, expires_at, taken (JSON array of
-- {"item", "location", "n"}). Not complete or key taken: nothing changed.
--
-- Findings behind the shape (MariaDB 10.11):
-- * The locking read sits in a derived table aggregated with JSON_ARRAYAGG
--   ... INTO, because a stored program can only read rows into variables.
--   Without ORDER BY: with `ORDER BY id LIMIT n` MariaDB applied the LIMIT
--   before skipping locked rows and answered nothing while another
--   transaction held the first rows (a cursor behaved the same). Primary key
--   order is the scan order anyway.
-- * SET TRANSACTION inside the procedure applies to the START TRANSACTION
--   after it (checked in information_schema.innodb_trx): READ COMMITTED, as
--   everywhere holdfast writes (no gap locks that block refills).
-- * A duplicate key on the hold (two requests racing with one new key) rolls
--   back and answers key_taken; any other error rolls back and is re-raised,
--   so no transaction is ever left open on a pooled connection.
-- MySQL 8.0 accepts the same syntax (JSON_TABLE 8.0.4+, JSON_ARRAYAGG,
-- locking clauses in derived tables); the tests run MariaDB.
DROP PROCEDURE IF EXISTS holdfast_reserve_fast;
CREATE PROCEDURE holdfast_reserve_fast(
    IN p_shop  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_key   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_fp    TEXT,
    IN p_ttl   BIGINT,
    IN p_wants TEXT)
proc: BEGIN
    DECLARE v_n INT DEFAULT JSON_LENGTH(p_wants);
    DECLARE v_i INT DEFAULT 0;
    DECLARE v_item VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_loc VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_qty INT;
    DECLARE v_got INT;
    DECLARE v_ids TEXT;
    DECLARE v_taken TEXT DEFAULT '[]';
    DECLARE v_id BIGINT;
    DECLARE v_expires DATETIME(6);
    DECLARE EXIT HANDLER FOR 1062
    BEGIN
        ROLLBACK;
        SELECT CAST(0 AS SIGNED) AS complete, CAST(1 AS SIGNED) AS key_taken,
               CAST(NULL AS SIGNED) AS id, CAST(NULL AS DATETIME(6)) AS expires_at, CAST(NULL AS CHAR) AS taken;
    END;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    IF EXISTS (SELECT 1 FROM reservations WHERE shop_id = p_shop AND idempotency_key = p_key) THEN
        ROLLBACK;
        SELECT CAST(0 AS SIGNED) AS complete, CAST(1 AS SIGNED) AS key_taken,
               CAST(NULL AS SIGNED) AS id, CAST(NULL AS DATETIME(6)) AS expires_at, CAST(NULL AS CHAR) AS taken;
        LEAVE proc;
    END IF;
    WHILE v_i < v_n DO
        SET v_item = JSON_UNQUOTE(JSON_EXTRACT(p_wants, CONCAT('$[', v_i, '].item')));
        SET v_loc = JSON_UNQUOTE(JSON_EXTRACT(p_wants, CONCAT('$[', v_i, '].location')));
        IF JSON_TYPE(JSON_EXTRACT(p_wants, CONCAT('$[', v_i, '].location'))) = 'NULL' THEN
            SET v_loc = NULL;
        END IF;
        SET v_qty = JSON_EXTRACT(p_wants, CONCAT('$[', v_i, '].qty'));
        IF v_loc IS NULL THEN
            SELECT MIN(location_id) INTO v_loc FROM inventory_levels
            WHERE shop_id = p_shop AND item_id = v_item;
        END IF;
        SET v_ids = NULL, v_got = 0;
        IF v_loc IS NOT NULL THEN
            SELECT JSON_ARRAYAGG(t.id), COUNT(*) INTO v_ids, v_got
            FROM (SELECT ru.id FROM reservation_units ru
                  WHERE ru.shop_id = p_shop AND ru.item_id = v_item AND ru.location_id = v_loc
                  LIMIT v_qty
                  FOR UPDATE SKIP LOCKED) AS t;
        END IF;
        IF v_got < v_qty THEN
            ROLLBACK;
            SELECT CAST(0 AS SIGNED) AS complete, CAST(0 AS SIGNED) AS key_taken,
                   CAST(NULL AS SIGNED) AS id, CAST(NULL AS DATETIME(6)) AS expires_at, CAST(NULL AS CHAR) AS taken;
            LEAVE proc;
        END IF;
        -- Only rows this transaction holds, each found by its primary key.
        DELETE ru
        FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id INT PATH '$')) AS d
        STRAIGHT_JOIN reservation_units ru
            ON ru.shop_id = p_shop AND ru.item_id = v_item AND ru.location_id = v_loc AND ru.id = d.id;
        SET v_taken = JSON_ARRAY_APPEND(v_taken, '$', JSON_OBJECT('item', v_item, 'location', v_loc, 'n', v_got));
        SET v_i = v_i + 1;
    END WHILE;

    SET v_expires = UTC_TIMESTAMP(6) + INTERVAL p_ttl SECOND;
    INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
    VALUES (p_shop, p_key, p_fp, 'held', v_expires);
    SET v_id = LAST_INSERT_ID();
    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
    SELECT p_shop, v_id, CONVERT(a.item_id USING ascii), CONVERT(a.location_id USING ascii), a.n, 'held'
    FROM JSON_TABLE(v_taken, '$[*]' COLUMNS (
             item_id     VARCHAR(64) PATH '$.item',
             location_id VARCHAR(64) PATH '$.location',
             n           INT PATH '$.n')) AS a;
    COMMIT;
    SELECT CAST(1 AS SIGNED) AS complete, CAST(0 AS SIGNED) AS key_taken,
           v_id AS id, v_expires AS expires_at, CAST(v_taken AS CHAR) AS taken;
END
