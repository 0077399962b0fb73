-- Webhooks: the deliveries not yet made of a subscription being removed
-- (shop, id).
DELETE FROM webhook_deliveries WHERE shop_id = ? AND subscription_id = ? AND status = 'pending'
