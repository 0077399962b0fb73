-- Webhooks: removes a subscription (shop, id).
DELETE FROM webhook_subscriptions WHERE shop_id = ? AND id = ?
