-- API tokens (`holdfast token create`). Only the SHA-256 of a token is kept;
-- the token itself is shown once, at creation. `id` is the token's public
-- part: the server finds the row by id, then compares hashes in constant time.
CREATE TABLE api_tokens (
    id          text COLLATE "C" PRIMARY KEY,
    hash        text NOT NULL,
    -- Shop ids the token reaches, comma separated (a shop id has no comma).
    shops       text COLLATE "C" NOT NULL,
    admin       boolean NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
