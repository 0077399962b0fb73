//! The `api_tokens` table (migration 0002 of each dialect) behind
//! [`TokenStore`]: plain statements, no locking. Tokens are created and
//! revoked by hand and read once per request (the server caches).

use async_trait::async_trait;
use chrono::Utc;
use holdfast_core::{Error, ShopId, TokenRecord, TokenStore};

use crate::dialect::{Dialect, Stmt};
use crate::driver::{Arg, Driver};
use crate::engine::SqlStore;
use crate::run::{self, Row, plain};

fn token<D: Dialect>(r: &Row<D>) -> sqlx::Result<TokenRecord> {
    let shops = D::Db::text(r, "shops")?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| ShopId::new(s).map_err(|e| sqlx::Error::Decode(Box::new(e))))
        .collect::<sqlx::Result<_>>()?;
    Ok(TokenRecord {
        id: D::Db::text(r, "id")?,
        hash: D::Db::text(r, "hash")?,
        shops,
        admin: D::Db::flag(r, "admin")?,
        created_at: D::Db::time(r, "created_at")?,
        revoked_at: D::Db::maybe_time(r, "revoked_at")?,
    })
}

#[async_trait]
impl<D: Dialect> TokenStore for SqlStore<D> {
    async fn insert_token(&self, t: &TokenRecord) -> Result<(), Error> {
        let shops = t.shops.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
        let args =
            [Arg::Text(&t.id), Arg::Text(&t.hash), Arg::Text(&shops), Arg::Flag(t.admin), Arg::Time(t.created_at)];
        plain!(self, "token", |c| run::exec::<D>(c, Stmt::TokenInsert, &args)).map(|_| ())
    }

    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>, Error> {
        let args = [Arg::Text(id)];
        plain!(self, "token", |c| async { Ok(run::all::<D, _>(c, Stmt::TokenFind, &args, token::<D>).await?.pop()) })
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        plain!(self, "token", |c| run::all::<D, _>(c, Stmt::TokenList, &[], token::<D>))
    }

    async fn revoke_token(&self, id: &str) -> Result<bool, Error> {
        let args = [Arg::Time(Utc::now()), Arg::Text(id)];
        let n = plain!(self, "token", |c| run::exec::<D>(c, Stmt::TokenRevoke, &args))?;
        Ok(n > 0)
    }
}
