//! The handlers, one module per area of the API. Each takes the caller
//! (authenticated and allowed the `{shop}`) before it reads the body, so an
//! anonymous or foreign caller learns nothing from a validation message.

pub mod admin;
pub mod health;
pub mod reservations;
pub mod stock;
pub mod webhooks;

use axum::Json;
use axum::extract::Path;
use axum::extract::rejection::{JsonRejection, PathRejection};

use crate::error::ApiError;

/// A JSON body, or the envelope's answer for why it could not be read.
pub type Body<T> = Result<Json<T>, JsonRejection>;

/// Path parameters as text; each handler parses the ones it uses, so a bad
/// one is a clean `invalid_request` naming the field.
pub type Params<T> = Result<Path<T>, PathRejection>;

pub fn body<T>(b: Body<T>) -> Result<T, ApiError> {
    Ok(b?.0)
}

pub fn params<T>(p: Params<T>) -> Result<T, ApiError> {
    Ok(p?.0)
}
