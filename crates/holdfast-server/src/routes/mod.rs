//! The handlers, one module per area of the API. Each takes the caller
//! (authenticated and allowed the `{shop}`) before it reads the body, so an
//! anonymous or foreign caller learns nothing from a validation message.

pub mod admin;
pub mod health;
pub mod reservations;
pub mod stock;
pub mod webhooks;

use std::str::FromStr;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use holdfast_core::{Invalid, ShopId};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{Ref, Required};
use utoipa::{IntoParams, ToSchema};

use crate::auth::ShopAccess;
use crate::error::ApiError;
use crate::state::AppState;

/// A JSON body, or the envelope's answer for why it could not be read.
pub type Body<T> = Result<Json<T>, JsonRejection>;

pub fn body<T>(b: Body<T>) -> Result<T, ApiError> {
    Ok(b?.0)
}

/// One parameter of a route's path: the name it has in the route's
/// template, and the type its text parses to. A bad one is a clean
/// `invalid_request` with the message of the type's own check.
pub trait PathParam: FromStr<Err = Invalid> + ToSchema {
    const NAME: &'static str;
    /// What the document says of it beyond its schema.
    const NOTE: Option<&'static str> = None;
}

impl PathParam for ShopId {
    const NAME: &'static str = "shop";
}

impl PathParam for holdfast_core::ReservationId {
    const NAME: &'static str = "id";
}

impl PathParam for holdfast_core::ItemId {
    const NAME: &'static str = "item";
}

impl PathParam for holdfast_core::LocationId {
    const NAME: &'static str = "location";
}

/// What a route's path names, parsed in the template's order, and the
/// document's description of those parameters: one declaration serves
/// both, so they cannot disagree.
pub trait PathParams: Sized {
    fn parse(raw: &RawPathParams) -> Result<Self, ApiError>;
    fn params() -> Vec<Parameter>;
}

impl<T: PathParam> PathParams for T {
    fn parse(raw: &RawPathParams) -> Result<Self, ApiError> {
        let text = raw.iter().find(|(name, _)| *name == T::NAME).map_or("", |(_, value)| value);
        Ok(text.parse()?)
    }

    fn params() -> Vec<Parameter> {
        let param = ParameterBuilder::new()
            .name(T::NAME)
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(T::NOTE)
            .schema(Some(Ref::from_schema_name(T::name())));
        vec![param.build()]
    }
}

impl<A: PathParams, B: PathParams> PathParams for (A, B) {
    fn parse(raw: &RawPathParams) -> Result<Self, ApiError> {
        Ok((A::parse(raw)?, B::parse(raw)?))
    }

    fn params() -> Vec<Parameter> {
        [A::params(), B::params()].concat()
    }
}

/// The `{shop}` parameter of the routes that take [`ShopAccess`].
impl IntoParams for ShopAccess {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        ShopId::params()
    }
}

/// A route under `/v1/shops/{shop}` reached by a caller allowed the shop
/// (checked first, as [`ShopAccess`] does), and what its path names after
/// the shop: `at`, parsed before the handler reads the body.
#[derive(Debug)]
pub struct ShopPath<P> {
    pub shop: ShopId,
    pub at: P,
}

impl<P: PathParams> FromRequestParts<AppState> for ShopPath<P> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let access = ShopAccess::from_request_parts(parts, state).await?;
        let raw = RawPathParams::from_request_parts(parts, state).await?;
        Ok(ShopPath { shop: access.shop, at: P::parse(&raw)? })
    }
}

impl<P: PathParams> IntoParams for ShopPath<P> {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        <(ShopId, P)>::params()
    }
}
