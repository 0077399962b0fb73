-- Webhooks: a shop's subscriptions, oldest first, without their secrets (shop).
SELECT id, shop_id, url, topics, created_at, disabled_at
FROM webhook_subscriptions
WHERE shop_id = ?
ORDER BY created_at, id
