-- Reserve, a coalesced batch's fast path, in one CALL: the fast path of
-- holdfast_reserve_fast (migration 0004) for every request of the batch, in
-- arrival order, in one transaction — one round trip and one commit for the
-- lot. p_reqs is a JSON array of {key, fp, ttl, wants: [{item, location,
-- qty}]} (location null: the first that stocks the item).
--
-- Each request runs inside a savepoint: it takes its rows with SKIP LOCKED
-- (rows an earlier request of the batch took are gone from its view; rows an
-- earlier request locked and gave back are still this transaction's, so it
-- may take them), and holds only when every line got all it asked for and
-- its key is new; otherwise its deletes are rolled back to the savepoint and
-- it changes nothing (the store runs it alone afterwards). Its items are then
-- off limits to the rest of the batch: every later request that wants one of
-- them is left for the store to run alone too, after it, so no request takes
-- a unit an earlier one in the batch could have had, and a request turned
-- away is told what there was at its turn. A key another
-- transaction inserts meanwhile makes the insert wait for it, then fail with
-- a duplicate key: that request is rolled back to its savepoint and answered
-- as key taken.
--
-- Answers one row, one column: a JSON array, per request in order,
-- {"s": "held", "id", "exp", "taken": [{item, location, n}]} or {"s": "short"}
-- or {"s": "key"}. READ COMMITTED, as everywhere holdfast writes; any other
-- error rolls back the whole batch before it leaves (the store retries it or
-- sends each request on alone). Lock order: pool rows (SKIP LOCKED), then
-- the holds' rows, per request.
DROP PROCEDURE IF EXISTS holdfast_reserve_batch;
CREATE PROCEDURE holdfast_reserve_batch(
    IN p_shop VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN p_reqs LONGTEXT)
BEGIN
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_fp TEXT;
    DECLARE v_ttl BIGINT;
    DECLARE v_wants TEXT;
    DECLARE v_i INT;
    DECLARE v_n INT;
    DECLARE v_item VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_loc VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_qty INT;
    DECLARE v_got INT;
    DECLARE v_ids TEXT;
    DECLARE v_taken TEXT;
    DECLARE v_id BIGINT;
    DECLARE v_expires DATETIME(6);
    DECLARE v_short INT;
    DECLARE v_dup INT DEFAULT 0;
    DECLARE v_out LONGTEXT DEFAULT '';
    -- Items of requests left short, between commas.
    DECLARE v_tainted TEXT DEFAULT ',';
    -- The batch is parsed once, here; each request's few wants are read from
    -- its own small document.
    DECLARE reqs CURSOR FOR
        SELECT r.k, r.fp, r.ttl, r.wants
        FROM JSON_TABLE(p_reqs, '$[*]' COLUMNS (
                 n     FOR ORDINALITY,
                 k     VARCHAR(128) PATH '$.key',
                 fp    TEXT PATH '$.fp',
                 ttl   BIGINT PATH '$.ttl',
                 wants JSON PATH '$.wants')) AS r
        ORDER BY r.n;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    OPEN reqs;
    next_request: LOOP
        FETCH reqs INTO v_key, v_fp, v_ttl, v_wants;
        IF v_done = 1 THEN
            LEAVE next_request;
        END IF;
        IF v_out <> '' THEN
            SET v_out = CONCAT(v_out, ',');
        END IF;
        IF EXISTS (SELECT 1 FROM reservations WHERE shop_id = p_shop AND idempotency_key = v_key) THEN
            SET v_out = CONCAT(v_out, '{"s":"key"}');
        ELSE
            SAVEPOINT hold;
            SET v_n = JSON_LENGTH(v_wants), v_short = 0, v_taken = '', v_dup = 0;
            -- An item a request before it in the batch was left short on.
            SET v_i = 0;
            WHILE v_short = 0 AND v_i < v_n DO
                IF LOCATE(CONCAT(',', JSON_UNQUOTE(JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].item'))), ','), v_tainted) > 0 THEN
                    SET v_short = 1;
                END IF;
                SET v_i = v_i + 1;
            END WHILE;
            SET v_i = 0;
            WHILE v_short = 0 AND v_i < v_n DO
                SET v_item = JSON_UNQUOTE(JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].item')));
                SET v_loc = NULL;
                IF JSON_TYPE(JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].location'))) <> 'NULL' THEN
                    SET v_loc = JSON_UNQUOTE(JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].location')));
                END IF;
                SET v_qty = JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].qty'));
                IF v_loc IS NULL THEN
                    SELECT MIN(location_id) INTO v_loc FROM inventory_levels
                    WHERE shop_id = p_shop AND item_id = v_item;
                END IF;
                SET v_ids = NULL, v_got = 0;
                IF v_loc IS NOT NULL THEN
                    -- No ORDER BY: MariaDB applies LIMIT before SKIP LOCKED
                    -- with one (migration 0004 says more).
                    SELECT JSON_ARRAYAGG(t.id), COUNT(*) INTO v_ids, v_got
                    FROM (SELECT ru.id FROM reservation_units ru
                          WHERE ru.shop_id = p_shop AND ru.item_id = v_item AND ru.location_id = v_loc
                          LIMIT v_qty
                          FOR UPDATE SKIP LOCKED) AS t;
                END IF;
                IF v_got < v_qty THEN
                    SET v_short = 1;
                ELSE
                    DELETE ru
                    FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id INT PATH '$')) AS d
                    STRAIGHT_JOIN reservation_units ru
                        ON ru.shop_id = p_shop AND ru.item_id = v_item AND ru.location_id = v_loc AND ru.id = d.id;
                    SET v_taken = CONCAT(v_taken, IF(v_taken = '', '', ','), '{"item":', JSON_QUOTE(v_item),
                                         ',"location":', JSON_QUOTE(v_loc), ',"n":', v_got, '}');
                    SET v_i = v_i + 1;
                END IF;
            END WHILE;
            IF v_short = 1 THEN
                ROLLBACK TO SAVEPOINT hold;
                SET v_out = CONCAT(v_out, '{"s":"short"}');
                SET v_i = 0;
                WHILE v_i < v_n DO
                    SET v_tainted = CONCAT(v_tainted, JSON_UNQUOTE(JSON_EXTRACT(v_wants, CONCAT('$[', v_i, '].item'))), ',');
                    SET v_i = v_i + 1;
                END WHILE;
            ELSE
                SET v_expires = UTC_TIMESTAMP(6) + INTERVAL v_ttl SECOND;
                INSERT INTO reservations (shop_id, idempotency_key, fingerprint, status, expires_at)
                VALUES (p_shop, v_key, v_fp, 'held', v_expires);
                IF v_dup = 1 THEN
                    ROLLBACK TO SAVEPOINT hold;
                    SET v_out = CONCAT(v_out, '{"s":"key"}');
                ELSE
                    SET v_id = LAST_INSERT_ID();
                    INSERT INTO reserved_quantities (shop_id, reservation_id, item_id, location_id, quantity, state)
                    SELECT p_shop, v_id, CONVERT(a.item_id USING ascii), CONVERT(a.location_id USING ascii), a.n, 'held'
                    FROM JSON_TABLE(CONCAT('[', v_taken, ']'), '$[*]' COLUMNS (
                             item_id     VARCHAR(64) PATH '$.item',
                             location_id VARCHAR(64) PATH '$.location',
                             n           INT PATH '$.n')) AS a;
                    SET v_out = CONCAT(v_out, '{"s":"held","id":', v_id, ',"exp":"',
                                       DATE_FORMAT(v_expires, '%Y-%m-%d %H:%i:%s.%f'), '","taken":[', v_taken, ']}');
                END IF;
                RELEASE SAVEPOINT hold;
            END IF;
        END IF;
    END LOOP;
    CLOSE reqs;
    COMMIT;
    SELECT CONCAT('[', v_out, ']') AS outcomes;
END
