-- API tokens (`holdfast token create`). Only the SHA-256 of a token is kept;
-- the token itself is shown once, at creation. `id` is the token's public
-- part: the server finds the row by id, then compares hashes in constant time.
-- Times are INTEGER unix milliseconds, as in 0001.
CREATE TABLE api_tokens (
    id          TEXT NOT NULL PRIMARY KEY,
    hash        TEXT NOT NULL,
    -- Shop ids the token reaches, comma separated (a shop id has no comma).
    shops       TEXT NOT NULL,
    admin       INTEGER NOT NULL CHECK (admin IN (0, 1)),
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
) STRICT;
