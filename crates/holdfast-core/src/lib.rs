//! holdfast's domain: identifiers, requests, reservations, stock levels, the
//! accounting invariant, the errors every interface shares, the `Store`
//! trait each backend implements, and the modes of the migration off Redis.
//! Nothing here does I/O.

pub mod conn;
pub mod error;
pub mod ids;
pub mod model;
pub mod modes;
pub mod store;
pub mod token;
pub mod webhook;

pub use conn::ConnHold;
pub use error::{Error, Invalid, Result, Shortfall};
pub use ids::{ConnTag, IdempotencyKey, ItemId, LocationId, Quantity, ReservationId, ShopId, Ttl};
pub use model::*;
pub use modes::{LedgerRow, LegacyLedger, Mode, ModeStore, Placement, Rules, bucket};
pub use store::{Backend, Settle, Store};
pub use token::{TokenRecord, TokenStore};
pub use webhook::{
    Attempt, Delivery, DeliveryStatus, Leased, QueueStats, Subscription, Topic, Topics, WEBHOOK_URL_MAX,
    WEBHOOK_URL_PATTERN, WebhookStore, check_webhook_url,
};
