-- API tokens (migration 0002): created and revoked by hand, read once per
-- request (the server caches). Revokes a live token (revoked_at, id).
UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL
