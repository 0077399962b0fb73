-- Webhooks: a receiver answered 410 Gone (subscription id, at): the
-- subscription is disabled.
UPDATE webhook_subscriptions SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL
