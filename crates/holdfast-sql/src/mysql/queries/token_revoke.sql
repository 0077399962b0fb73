-- API tokens (migration 0002): created and revoked by hand, read once per
-- request (the server caches). Revokes a live token (revoked_at, id).
UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL
