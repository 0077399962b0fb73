-- holdfast schema, PostgreSQL. Identifiers use the "C" collation: byte order
-- is the lock order the engine relies on (ORDER BY item_id, location_id), and
-- it compares faster than a linguistic collation.

-- The ledger: one row per (shop, item, location).
CREATE TABLE inventory_levels (
    shop_id     text COLLATE "C" NOT NULL,
    item_id     text COLLATE "C" NOT NULL,
    location_id text COLLATE "C" NOT NULL,
    on_hand     bigint NOT NULL DEFAULT 0 CHECK (on_hand >= 0),
    -- Committed units already folded in from claimed reservations.
    committed   bigint NOT NULL DEFAULT 0 CHECK (committed >= 0),
    -- Available units counted here and not (yet) in the pool.
    unpooled    bigint NOT NULL DEFAULT 0 CHECK (unpooled >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shop_id, item_id, location_id)
);

-- The pool: one row per free unit, in slots 0..pool_cap. The composite
-- primary key makes a locking read take exactly one lock per unit.
CREATE TABLE reservation_units (
    shop_id     text COLLATE "C" NOT NULL,
    item_id     text COLLATE "C" NOT NULL,
    location_id text COLLATE "C" NOT NULL,
    id          integer NOT NULL CHECK (id >= 0),
    PRIMARY KEY (shop_id, item_id, location_id, id)
);

CREATE TABLE reservations (
    shop_id         text COLLATE "C" NOT NULL,
    id              bigint GENERATED ALWAYS AS IDENTITY,
    idempotency_key text COLLATE "C" NOT NULL,
    -- Canonical text of the requested lines: a replay must match it.
    fingerprint     text NOT NULL,
    status          text NOT NULL CHECK (status IN ('held', 'claimed', 'released', 'expired')),
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shop_id, id),
    UNIQUE (shop_id, idempotency_key)
);

-- The sweeper's queue: only live holds, in expiry order.
CREATE INDEX reservations_due ON reservations (expires_at) WHERE status = 'held';

-- Units per (reservation, item, location) and where they stand.
CREATE TABLE reserved_quantities (
    shop_id        text COLLATE "C" NOT NULL,
    reservation_id bigint NOT NULL,
    item_id        text COLLATE "C" NOT NULL,
    location_id    text COLLATE "C" NOT NULL,
    quantity       integer NOT NULL CHECK (quantity > 0),
    state          text NOT NULL
        CHECK (state IN ('held', 'committed', 'settled', 'returned', 'restocked')),
    PRIMARY KEY (shop_id, reservation_id, item_id, location_id)
);

-- Open rows per (item, location): what levels, audit and the fold read.
-- Folded rows ('settled', 'restocked') drop out of it.
CREATE INDEX reserved_quantities_open
    ON reserved_quantities (shop_id, item_id, location_id, state)
    WHERE state IN ('held', 'committed', 'returned');
