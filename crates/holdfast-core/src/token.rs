//! API tokens as the database keeps them: a public id, the shops the token
//! may reach, whether it may reach `/admin`, and only a hash of the secret.
//! Making and checking secrets is the server's business; a `TokenStore`
//! only keeps the rows.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ids::ShopId;

/// One token's row. `hash` is the hex SHA-256 of the whole token text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Public identifier, also the second part of the token text; safe to log.
    pub id: String,
    pub shops: Vec<ShopId>,
    pub admin: bool,
    #[serde(skip_serializing)]
    pub hash: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait TokenStore: Send + Sync + std::fmt::Debug {
    /// Stores a new token row (with `revoked_at` empty).
    async fn insert_token(&self, token: &TokenRecord) -> Result<()>;

    /// The row for `id`, revoked or not.
    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>>;

    /// Every row, oldest first.
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;

    /// Marks the token revoked; `false` when no live token has that id.
    async fn revoke_token(&self, id: &str) -> Result<bool>;
}
