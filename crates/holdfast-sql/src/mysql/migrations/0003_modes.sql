-- Migration from a Redis counter model (docs/design.md): per-shop modes, rollout
-- rules, the kill switch, and the SQL ledger of the legacy Redis store. The
-- holdfast-sql serves them to holdfast-redis; every serving process
-- polls them, so a change here reaches all of them within a second.
-- IF NOT EXISTS / INSERT IGNORE: DDL commits on its own here, so a migration
-- may run again.

-- Explicit assignments: a shop listed here has this mode whatever the
-- percentages say.
CREATE TABLE IF NOT EXISTS shop_modes (
    shop_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    mode        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
        CHECK (mode IN ('redis', 'shadow', 'sql-primary', 'sql')),
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

-- Percentage rollout: `percent` of all shops, picked by a stable hash of
-- shop_id, are at this mode or a later one (redis < shadow < sql-primary < sql).
CREATE TABLE IF NOT EXISTS mode_rollout (
    mode        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY
        CHECK (mode IN ('shadow', 'sql-primary', 'sql')),
    percent     INT NOT NULL CHECK (percent BETWEEN 0 AND 100),
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

-- One row: engaged = every sql-primary shop is served by Redis again.
CREATE TABLE IF NOT EXISTS kill_switch (
    id          INT NOT NULL PRIMARY KEY CHECK (id = 1),
    engaged     BOOLEAN NOT NULL,
    changed_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;
INSERT IGNORE INTO kill_switch (id, engaged) VALUES (1, false);

-- The legacy design's SQL side: on_hand and the committed (sold) units per
-- (shop, item, location). Available units and live holds live in Redis; a
-- legacy claim adds here and then removes the hold from Redis, in two
-- systems with no transaction spanning both.
CREATE TABLE IF NOT EXISTS legacy_ledger (
    shop_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    item_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    location_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    on_hand     BIGINT NOT NULL DEFAULT 0 CHECK (on_hand >= 0),
    committed   BIGINT NOT NULL DEFAULT 0 CHECK (committed >= 0),
    PRIMARY KEY (shop_id, item_id, location_id)
) ENGINE = InnoDB;
