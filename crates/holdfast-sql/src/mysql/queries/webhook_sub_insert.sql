-- Webhooks: a new subscription (id, shop, url, topics, secret, created_at).
INSERT INTO webhook_subscriptions (id, shop_id, url, topics, secret, created_at) VALUES (?, ?, ?, ?, ?, ?)
