-- holdfast schema, SQLite (the bundled 3.46; RETURNING, UPDATE … FROM,
-- `->>` and unixepoch('subsec') need 3.42 or later).
--
-- * STRICT tables: a column holds the type it declares, as in PostgreSQL.
-- * Text compares with SQLite's default BINARY collation: byte order, the
--   same order PostgreSQL gets from "C", so ORDER BY item_id, location_id
--   means the same everywhere.
-- * Times are INTEGER unix milliseconds, UTC: SQLite has no timestamp type,
--   and integers compare and index exactly. The clock is SQLite's own
--   (unixepoch('subsec')), read per statement, like now() in PostgreSQL.
-- * Tables keyed by a composite key are WITHOUT ROWID: the rows live in
--   primary-key order, as in InnoDB, so a pool scan reads one b-tree.

-- The ledger: one row per (shop, item, location).
CREATE TABLE inventory_levels (
    shop_id     TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    location_id TEXT NOT NULL,
    on_hand     INTEGER NOT NULL DEFAULT 0 CHECK (on_hand >= 0),
    -- Committed units already folded in from claimed reservations.
    committed   INTEGER NOT NULL DEFAULT 0 CHECK (committed >= 0),
    -- Available units counted here and not (yet) in the pool.
    unpooled    INTEGER NOT NULL DEFAULT 0 CHECK (unpooled >= 0),
    updated_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    PRIMARY KEY (shop_id, item_id, location_id)
) STRICT, WITHOUT ROWID;

-- The pool: one row per free unit, in slots 0..pool_cap.
CREATE TABLE reservation_units (
    shop_id     TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    location_id TEXT NOT NULL,
    id          INTEGER NOT NULL CHECK (id >= 0),
    PRIMARY KEY (shop_id, item_id, location_id, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE reservations (
    -- The rowid: unique across shops and never reused (AUTOINCREMENT), so an
    -- id handed out once names one reservation forever. Every query still
    -- filters by shop_id: a shop never reaches another shop's reservation.
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    shop_id         TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    -- Canonical text of the requested lines: a replay must match it.
    fingerprint     TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('held', 'claimed', 'released', 'expired')),
    expires_at      INTEGER NOT NULL,
    created_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    updated_at      INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
    UNIQUE (shop_id, idempotency_key)
) STRICT;

-- The sweeper's queue: only live holds, in expiry order. (SQLite uses a
-- partial index when the query repeats its WHERE term: status = 'held'.)
CREATE INDEX reservations_due ON reservations (expires_at) WHERE status = 'held';

-- Units per (reservation, item, location) and where they stand.
CREATE TABLE reserved_quantities (
    shop_id        TEXT NOT NULL,
    reservation_id INTEGER NOT NULL,
    item_id        TEXT NOT NULL,
    location_id    TEXT NOT NULL,
    quantity       INTEGER NOT NULL CHECK (quantity > 0),
    state          TEXT NOT NULL
        CHECK (state IN ('held', 'committed', 'settled', 'returned', 'restocked')),
    PRIMARY KEY (shop_id, reservation_id, item_id, location_id)
) STRICT, WITHOUT ROWID;

-- Rows per (item, location) by state: what levels, audit, the fold and the
-- inline expiry read. Not partial, unlike PostgreSQL's: SQLite would use a
-- partial index only for queries that repeat its exact WHERE term, and these
-- ask for one state or two. Folded rows ('settled', 'restocked') sit under
-- their own keys, so the open states are still found by seeks, not scans.
CREATE INDEX reserved_quantities_by_state
    ON reserved_quantities (shop_id, item_id, location_id, state);
