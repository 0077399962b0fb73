-- holdfast schema, MySQL 8.0+ and MariaDB 10.6+ (InnoDB). Identifiers are
-- ASCII with a binary collation: byte order is the lock order the engine
-- relies on (ORDER BY item_id, location_id), as "C" is on PostgreSQL.
-- DDL commits implicitly on both servers, so every statement is IF NOT EXISTS
-- and a migration interrupted halfway can simply run again. Secondary indexes
-- are declared inline because MySQL has no CREATE INDEX IF NOT EXISTS
-- (MariaDB has). Neither has partial indexes, so the PostgreSQL ones become
-- plain indexes led by the columns their WHERE clause named.

-- The ledger: one row per (shop, item, location).
CREATE TABLE IF NOT EXISTS inventory_levels (
    shop_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    item_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    location_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    on_hand     BIGINT NOT NULL DEFAULT 0,
    -- Committed units already folded in from claimed reservations.
    committed   BIGINT NOT NULL DEFAULT 0,
    -- Available units counted here and not (yet) in the pool.
    unpooled    BIGINT NOT NULL DEFAULT 0,
    updated_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, item_id, location_id),
    CONSTRAINT inventory_levels_on_hand CHECK (on_hand >= 0),
    CONSTRAINT inventory_levels_committed CHECK (committed >= 0),
    CONSTRAINT inventory_levels_unpooled CHECK (unpooled >= 0)
) ENGINE = InnoDB;

-- The pool: one row per free unit, in slots 0..pool_cap. The composite
-- primary key is the clustered index, so a locking read takes exactly one
-- record lock per unit. (An AUTO_INCREMENT key plus a secondary index on
-- (shop, item, location) would lock the secondary record and the clustered
-- record: two locks per unit.)
CREATE TABLE IF NOT EXISTS reservation_units (
    shop_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    item_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    location_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id          INT NOT NULL,
    PRIMARY KEY (shop_id, item_id, location_id, id),
    CONSTRAINT reservation_units_id CHECK (id >= 0)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS reservations (
    shop_id         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id              BIGINT NOT NULL AUTO_INCREMENT,
    idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- Canonical text of the requested lines: a replay must match it.
    fingerprint     TEXT NOT NULL,
    status          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at      DATETIME(6) NOT NULL,
    created_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, id),
    UNIQUE KEY reservations_key (shop_id, idempotency_key),
    -- InnoDB wants an AUTO_INCREMENT column to lead some index.
    KEY reservations_id (id),
    -- The sweeper's queue: live holds in expiry order.
    KEY reservations_due (status, expires_at),
    CONSTRAINT reservations_status CHECK (status IN ('held', 'claimed', 'released', 'expired'))
) ENGINE = InnoDB;

-- Units per (reservation, item, location) and where they stand.
CREATE TABLE IF NOT EXISTS reserved_quantities (
    shop_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    reservation_id BIGINT NOT NULL,
    item_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    location_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    quantity       INT NOT NULL,
    state          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    PRIMARY KEY (shop_id, reservation_id, item_id, location_id),
    -- Rows per (item, location) and state: what levels, audit and the fold read.
    KEY reserved_quantities_open (shop_id, item_id, location_id, state),
    CONSTRAINT reserved_quantities_quantity CHECK (quantity > 0),
    CONSTRAINT reserved_quantities_state
        CHECK (state IN ('held', 'committed', 'settled', 'returned', 'restocked'))
) ENGINE = InnoDB;
