-- API tokens (`holdfast token create`). Only the SHA-256 of a token is kept;
-- the token itself is shown once, at creation. `id` is the token's public
-- part: the server finds the row by id, then compares hashes in constant time.
-- IF NOT EXISTS: DDL commits on its own here, so a migration may run again.
CREATE TABLE IF NOT EXISTS api_tokens (
    id          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    hash        CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- Shop ids the token reaches, comma separated (a shop id has no comma).
    shops       TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    admin       BOOLEAN NOT NULL,
    created_at  DATETIME(6) NOT NULL,
    revoked_at  DATETIME(6) NULL
) ENGINE = InnoDB;
