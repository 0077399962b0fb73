//! The errors every store and interface shares. Each variant carries policy: it
//! maps to one stable error code and one HTTP status, and never carries SQL text.

use serde::Serialize;

use crate::ids::ItemId;
use crate::model::ReservationStatus;

/// A value the caller sent that holdfast will not accept. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// What one cart line asked for and what it could have had at that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    pub item: ItemId,
    pub requested: u32,
    pub available: u32,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Invalid(#[from] Invalid),

    #[error("insufficient stock for {} line(s)", .0.iter().filter(|s| s.available < s.requested).count())]
    InsufficientStock(Vec<Shortfall>),

    #[error("idempotency key {0:?} was already used with other lines")]
    IdempotencyConflict(String),

    #[error("reservation not found")]
    NotFound,

    #[error("the reservation expired and its units went back to stock")]
    Expired,

    #[error("the reservation is {0} and cannot be {1}")]
    WrongStatus(ReservationStatus, &'static str),

    #[error("{0}")]
    StockConflict(String),

    #[error("the database stayed contended after {0} attempts; try again")]
    RetriesExhausted(u32),

    #[error("database unavailable: {0}")]
    Unavailable(String),

    #[error("internal store error: {0}")]
    Internal(String),
}

impl Error {
    /// Stable, documented code; part of the API contract.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "invalid_request",
            Error::InsufficientStock(_) => "insufficient_stock",
            Error::IdempotencyConflict(_) => "idempotency_conflict",
            Error::NotFound => "not_found",
            Error::Expired => "reservation_expired",
            Error::WrongStatus(..) => "invalid_state",
            Error::StockConflict(_) => "stock_conflict",
            Error::RetriesExhausted(_) => "contended",
            Error::Unavailable(_) => "unavailable",
            Error::Internal(_) => "internal",
        }
    }

    /// The HTTP status that goes with [`Error::code`].
    pub fn http_status(&self) -> u16 {
        match self {
            Error::Invalid(_) => 422,
            Error::InsufficientStock(_)
            | Error::IdempotencyConflict(_)
            | Error::Expired
            | Error::WrongStatus(..)
            | Error::StockConflict(_) => 409,
            Error::NotFound => 404,
            Error::RetriesExhausted(_) | Error::Unavailable(_) => 503,
            Error::Internal(_) => 500,
        }
    }

    /// Process exit code for the CLI: 2 bad input, 3 insufficient stock,
    /// 4 other refusals, 5 database trouble.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Invalid(_) => 2,
            Error::InsufficientStock(_) => 3,
            Error::IdempotencyConflict(_)
            | Error::NotFound
            | Error::Expired
            | Error::WrongStatus(..)
            | Error::StockConflict(_) => 4,
            Error::RetriesExhausted(_) | Error::Unavailable(_) | Error::Internal(_) => 5,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
