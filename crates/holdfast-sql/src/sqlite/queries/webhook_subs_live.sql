-- Webhooks: every subscription still enabled, for the outbox's view of
-- which shop wants which topics.
SELECT id, shop_id, topics FROM webhook_subscriptions WHERE disabled_at IS NULL
