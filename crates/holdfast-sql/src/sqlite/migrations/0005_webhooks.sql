-- Webhooks (docs/design.md, "Events and webhooks"). A subscription keeps its
-- secret in the clear: every delivery is signed with it, so it cannot be
-- kept as a hash the way an API token is. Times are INTEGER unix
-- milliseconds, as in 0001.
CREATE TABLE webhook_subscriptions (
    id           TEXT NOT NULL PRIMARY KEY,
    shop_id      TEXT NOT NULL,
    url          TEXT NOT NULL,
    -- Topic names, comma separated.
    topics       TEXT NOT NULL,
    secret       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    disabled_at  INTEGER
) STRICT;
CREATE INDEX webhook_subscriptions_shop ON webhook_subscriptions (shop_id, created_at);

-- The outbox: one row per event and subscription, written in the
-- transaction of the change that caused the event, and the delivery's state
-- after that. `payload` is the request body, signed as stored.
CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id         TEXT NOT NULL,
    shop_id          TEXT NOT NULL,
    subscription_id  TEXT NOT NULL,
    topic            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    -- Attempts started; a worker records an outcome only for the attempt it
    -- leased, so one whose lease ran out cannot overwrite a later one's.
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    lease_until      INTEGER,
    last_status      INTEGER,
    last_error       TEXT,
    delivered_at     INTEGER
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_shop ON webhook_deliveries (shop_id, id);
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE status = 'delivered';
