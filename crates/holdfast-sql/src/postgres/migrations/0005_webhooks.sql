-- Webhooks (docs/design.md, "Events and webhooks"). A subscription keeps its
-- secret in the clear: every delivery is signed with it, so it cannot be
-- kept as a hash the way an API token is.
CREATE TABLE webhook_subscriptions (
    id           text COLLATE "C" PRIMARY KEY,
    shop_id      text COLLATE "C" NOT NULL,
    url          text NOT NULL,
    -- Topic names, comma separated.
    topics       text NOT NULL,
    secret       text NOT NULL,
    created_at   timestamptz NOT NULL,
    disabled_at  timestamptz
);
CREATE INDEX webhook_subscriptions_shop ON webhook_subscriptions (shop_id, created_at);

-- The outbox: one row per event and subscription, written in the
-- transaction of the change that caused the event, and the delivery's state
-- after that. `payload` is the request body, signed as stored.
CREATE TABLE webhook_deliveries (
    id               bigserial PRIMARY KEY,
    event_id         text COLLATE "C" NOT NULL,
    shop_id          text COLLATE "C" NOT NULL,
    subscription_id  text COLLATE "C" NOT NULL,
    topic            text COLLATE "C" NOT NULL,
    payload          text NOT NULL,
    status           text COLLATE "C" NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'dead')),
    -- Attempts started; a worker records an outcome only for the attempt it
    -- leased, so one whose lease ran out cannot overwrite a later one's.
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    next_attempt_at  timestamptz NOT NULL,
    lease_until      timestamptz,
    last_status      integer,
    last_error       text,
    delivered_at     timestamptz
);
-- The workers' queue: only pending rows, in the order they are due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_shop ON webhook_deliveries (shop_id, id);
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id) WHERE status = 'pending';
-- Retention of delivered rows, oldest first.
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE status = 'delivered';
