-- Webhooks: removes a subscription (shop, id).
DELETE FROM webhook_subscriptions WHERE shop_id = ?1 AND id = ?2
