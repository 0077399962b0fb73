-- API tokens (migration 0002): created and revoked by hand, read once per
-- request (the server caches). One token (id).
SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens WHERE id = ?1
