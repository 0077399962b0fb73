-- Migration from a Redis counter model (docs/design.md): per-shop modes, rollout
-- rules, the kill switch, and the SQL ledger of the legacy Redis store. The
-- holdfast-sql serves them to holdfast-redis; every serving process
-- polls them, so a change here reaches all of them within a second.
-- Times are INTEGER unix milliseconds, as in 0001.

-- Explicit assignments: a shop listed here has this mode whatever the
-- percentages say.
CREATE TABLE shop_modes (
    shop_id     TEXT NOT NULL PRIMARY KEY,
    mode        TEXT NOT NULL CHECK (mode IN ('redis', 'shadow', 'sql-primary', 'sql')),
    updated_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- Percentage rollout: `percent` of all shops, picked by a stable hash of
-- shop_id, are at this mode or a later one (redis < shadow < sql-primary < sql).
CREATE TABLE mode_rollout (
    mode        TEXT NOT NULL PRIMARY KEY CHECK (mode IN ('shadow', 'sql-primary', 'sql')),
    percent     INTEGER NOT NULL CHECK (percent BETWEEN 0 AND 100),
    updated_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;

-- One row: engaged = every sql-primary shop is served by Redis again.
CREATE TABLE kill_switch (
    id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    engaged     INTEGER NOT NULL CHECK (engaged IN (0, 1)),
    changed_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER))
) STRICT;
INSERT INTO kill_switch (id, engaged) VALUES (1, 0);

-- The legacy design's SQL side: on_hand and the committed (sold) units per
-- (shop, item, location). Available units and live holds live in Redis; a
-- legacy claim adds here and then removes the hold from Redis, in two
-- systems with no transaction spanning both.
CREATE TABLE legacy_ledger (
    shop_id TEXT NOT NULL, item_id TEXT NOT NULL, location_id TEXT NOT NULL,
    on_hand     INTEGER NOT NULL DEFAULT 0 CHECK (on_hand >= 0),
    committed   INTEGER NOT NULL DEFAULT 0 CHECK (committed >= 0),
    PRIMARY KEY (shop_id, item_id, location_id)
) STRICT;
