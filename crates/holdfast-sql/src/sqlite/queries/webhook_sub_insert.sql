-- Webhooks: a new subscription (id, shop, url, topics, secret, created_at).
INSERT INTO webhook_subscriptions (id, shop_id, url, topics, secret, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
