//! The `api_tokens` table (migration 0002 of each dialect) behind
//! [`TokenStore`]. Four plain statements per dialect, no locking: tokens are
//! created and revoked by hand and read once per request (the server caches).
//! The statements differ only in placeholders and time types, so they sit
//! here side by side rather than in each dialect's `queries/`.
//! Each names its process, `/* conn_tag:token */`, as SPEC §8 asks.

use async_trait::async_trait;
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use holdfast_core::{Error, ShopId, TokenRecord, TokenStore};

use crate::engine::SqlStore;
use crate::{mysql::My, postgres::Pg, sqlite::Lite};

fn shops_text(shops: &[ShopId]) -> String {
    shops.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

fn parse_shops(text: &str) -> Result<Vec<ShopId>, Error> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| ShopId::new(s).map_err(|e| Error::Internal(format!("bad shop in api_tokens: {e}"))))
        .collect()
}

fn db_error(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => Error::Unavailable(e.to_string()),
        e => Error::Internal(format!("api_tokens: {e}")),
    }
}

fn text<R: sqlx::Row>(r: &R, col: &str) -> sqlx::Result<String>
where
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    r.try_get(col)
}

/// MySQL reports `ascii_bin` columns as binary: read bytes, then text.
fn ascii_text(r: &sqlx::mysql::MySqlRow, col: &str) -> sqlx::Result<String> {
    use sqlx::Row;
    let bytes: Vec<u8> = r.try_get(col)?;
    String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

/// PostgreSQL's timestamptz is a `DateTime<Utc>` as it is.
fn same(t: DateTime<Utc>) -> DateTime<Utc> {
    t
}

/// MySQL's DATETIME has no zone: it holds UTC here.
fn naive(t: DateTime<Utc>) -> NaiveDateTime {
    t.naive_utc()
}

fn from_naive(t: NaiveDateTime) -> DateTime<Utc> {
    Utc.from_utc_datetime(&t)
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// Implements [`TokenStore`] for one dialect. `$enc`/`$dec` turn a time into
/// the column's type and back (SQLite keeps unix milliseconds).
macro_rules! token_store {
    ($dialect:ty, $row:ty, $text:expr, $time:ty, $enc:expr, $dec:expr,
     insert: $insert:literal, find: $find:literal, list: $list:literal, revoke: $revoke:literal) => {
        impl SqlStore<$dialect> {
            fn token_row(r: &$row) -> Result<TokenRecord, Error> {
                use sqlx::Row;
                let get = |e: sqlx::Error| Error::Internal(format!("api_tokens row: {e}"));
                let created: $time = r.try_get("created_at").map_err(get)?;
                let revoked: Option<$time> = r.try_get("revoked_at").map_err(get)?;
                Ok(TokenRecord {
                    id: $text(r, "id").map_err(get)?,
                    hash: $text(r, "hash").map_err(get)?,
                    shops: parse_shops(&$text(r, "shops").map_err(get)?)?,
                    admin: r.try_get("admin").map_err(get)?,
                    created_at: $dec(created),
                    revoked_at: revoked.map($dec),
                })
            }
        }

        #[async_trait]
        impl TokenStore for SqlStore<$dialect> {
            async fn insert_token(&self, t: &TokenRecord) -> Result<(), Error> {
                sqlx::query($insert)
                    .bind(&t.id)
                    .bind(&t.hash)
                    .bind(shops_text(&t.shops))
                    .bind(t.admin)
                    .bind($enc(t.created_at))
                    .execute(&self.pool)
                    .await
                    .map_err(db_error)?;
                Ok(())
            }

            async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, Error> {
                let row = sqlx::query($find).bind(id).fetch_optional(&self.pool).await.map_err(db_error)?;
                row.as_ref().map(Self::token_row).transpose()
            }

            async fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error> {
                let rows = sqlx::query($list).fetch_all(&self.pool).await.map_err(db_error)?;
                rows.iter().map(Self::token_row).collect()
            }

            async fn revoke_token(&self, id: &str) -> Result<bool, Error> {
                let done =
                    sqlx::query($revoke).bind($enc(Utc::now())).bind(id).execute(&self.pool).await.map_err(db_error)?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

token_store!(Pg, sqlx::postgres::PgRow, text::<sqlx::postgres::PgRow>, DateTime<Utc>, same, same,
    insert: "/* conn_tag:token */ INSERT INTO api_tokens (id, hash, shops, admin, created_at) VALUES ($1, $2, $3, $4, $5)",
    find: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens WHERE id = $1",
    list: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens ORDER BY created_at, id",
    revoke: "/* conn_tag:token */ UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL");

token_store!(My, sqlx::mysql::MySqlRow, ascii_text, NaiveDateTime, naive, from_naive,
    insert: "/* conn_tag:token */ INSERT INTO api_tokens (id, hash, shops, admin, created_at) VALUES (?, ?, ?, ?, ?)",
    find: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens WHERE id = ?",
    list: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens ORDER BY created_at, id",
    revoke: "/* conn_tag:token */ UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");

token_store!(Lite, sqlx::sqlite::SqliteRow, text::<sqlx::sqlite::SqliteRow>, i64, millis, from_millis,
    insert: "/* conn_tag:token */ INSERT INTO api_tokens (id, hash, shops, admin, created_at) VALUES (?, ?, ?, ?, ?)",
    find: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens WHERE id = ?",
    list: "/* conn_tag:token */ SELECT id, hash, shops, admin, created_at, revoked_at FROM api_tokens ORDER BY created_at, id",
    revoke: "/* conn_tag:token */ UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
