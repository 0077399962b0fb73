-- API tokens (migration 0002): created and revoked by hand, read once per
-- request (the server caches). A new token (id, hash, shops, admin, created_at).
INSERT INTO api_tokens (id, hash, shops, admin, created_at) VALUES ($1, $2, $3, $4, $5)
