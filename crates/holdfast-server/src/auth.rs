//! Bearer tokens. A token reads `hf_<id>_<secret>`: `id` is public (it names
//! the row, shows in `token list` and in logs), `secret` is 32 random bytes.
//! The database keeps only the SHA-256 of the whole token; a request's token
//! is hashed and compared with the row's hash in constant time.
//!
//! A shop token reaches only its shops: any other shop answers `404`, as if it
//! did not exist, so ids cannot be probed. Only admin tokens reach `/admin`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::Utc;
use holdfast_core::{Error, ShopId, TokenRecord, TokenStore};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::routes::PathParams;
use crate::state::AppState;

const PREFIX: &str = "hf_";
/// Entries kept before the cache is emptied; bounds memory whatever callers send.
const CACHE_MAX: usize = 10_000;

/// Who is calling, once the token checked out.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `None`: every shop (admin without auth, `--insecure-no-auth`).
    pub shops: Option<Vec<ShopId>>,
    pub admin: bool,
    /// The token's public id, for logs.
    pub token_id: Option<String>,
}

impl Caller {
    pub fn may(&self, shop: &ShopId) -> bool {
        self.shops.as_ref().is_none_or(|s| s.contains(shop))
    }
}

/// A freshly made token: the text is shown once and never stored.
#[derive(Debug)]
pub struct NewToken {
    pub text: String,
    pub record: TokenRecord,
}

pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Makes a token for `shops` (and `/admin` when `admin`); the caller stores
/// `record` and shows `text` once.
pub fn mint(shops: Vec<ShopId>, admin: bool) -> NewToken {
    let mut id = [0u8; 8];
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut id);
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let id = hex::encode(id);
    let text = format!("{PREFIX}{id}_{}", hex::encode(secret));
    let record = TokenRecord { id, shops, admin, hash: hash(&text), created_at: Utc::now(), revoked_at: None };
    NewToken { text, record }
}

/// Checks bearer tokens against the token table, with a short cache.
#[derive(Debug)]
pub struct Authenticator {
    tokens: Arc<dyn TokenStore>,
    insecure: bool,
    cache_for: Duration,
    cache: Mutex<HashMap<String, (Instant, TokenRecord)>>,
}

impl Authenticator {
    pub fn new(tokens: Arc<dyn TokenStore>, insecure: bool, cache_for: Duration) -> Self {
        Self { tokens, insecure, cache_for, cache: Mutex::new(HashMap::new()) }
    }

    /// The caller behind an `Authorization` header value (or its absence).
    pub async fn authenticate(&self, header: Option<&str>) -> Result<Caller, ApiError> {
        if self.insecure {
            return Ok(Caller { shops: None, admin: true, token_id: None });
        }
        let header = header.ok_or_else(|| ApiError::unauthorized("send Authorization: Bearer <token>"))?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| ApiError::unauthorized("the Authorization header must be Bearer <token>"))?;
        let invalid = || ApiError::unauthorized("the token is unknown or revoked");
        let id =
            token.strip_prefix(PREFIX).and_then(|rest| rest.split_once('_')).map(|(id, _)| id).ok_or_else(invalid)?;
        if id.is_empty() || id.len() > 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid());
        }
        let record = self.record(id).await?.ok_or_else(invalid)?;
        // Constant time: how far a guess matches must not show in the timing.
        let matches: bool = hash(token).as_bytes().ct_eq(record.hash.as_bytes()).into();
        if !matches || record.revoked_at.is_some() {
            return Err(invalid());
        }
        Ok(Caller { shops: Some(record.shops), admin: record.admin, token_id: Some(record.id) })
    }

    async fn record(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        if !self.cache_for.is_zero() {
            let cache = self.cache.lock().expect("auth cache lock");
            if let Some((at, rec)) = cache.get(id)
                && at.elapsed() < self.cache_for
            {
                return Ok(Some(rec.clone()));
            }
        }
        let found = self.tokens.find_token(id).await.map_err(|e| match e {
            Error::Unavailable(_) => ApiError::from(e),
            other => {
                tracing::error!(error = %other, "token lookup failed");
                ApiError::from(Error::Internal("token lookup failed".into()))
            }
        })?;
        if let Some(rec) = &found
            && !self.cache_for.is_zero()
        {
            let mut cache = self.cache.lock().expect("auth cache lock");
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(id.to_string(), (Instant::now(), rec.clone()));
        }
        Ok(found)
    }
}

fn authorization(parts: &Parts) -> Option<&str> {
    parts.headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok())
}

/// A caller allowed to act on the `{shop}` of the route.
#[derive(Debug, Clone)]
pub struct ShopAccess {
    pub shop: ShopId,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for ShopAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // Authentication first: an anonymous caller learns nothing, not even
        // whether a shop id is well formed.
        let caller = state.auth.authenticate(authorization(parts)).await?;
        let params = RawPathParams::from_request_parts(parts, state).await?;
        let shop = ShopId::parse(&params)?;
        if !caller.may(&shop) {
            return Err(ApiError::not_found(format!("no shop {shop} for this token")));
        }
        Ok(ShopAccess { shop, caller })
    }
}

/// A caller with an admin token.
#[derive(Debug, Clone)]
pub struct Admin(pub Caller);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = state.auth.authenticate(authorization(parts)).await?;
        if !caller.admin {
            return Err(ApiError::forbidden("this route needs an admin token"));
        }
        Ok(Admin(caller))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_are_distinct_and_hash_to_their_record() {
        let a = mint(vec![ShopId::new("s1").unwrap()], false);
        let b = mint(vec![], true);
        assert_ne!(a.text, b.text);
        assert_eq!(hash(&a.text), a.record.hash);
        assert!(a.text.starts_with(&format!("hf_{}_", a.record.id)));
        assert_eq!(a.text.len(), 3 + 16 + 1 + 64);
    }
}
