//! `/v1/shops/{shop}/reservations…`: create (201, or 200 for a replay of the
//! same key and lines), get, claim, release, extend.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use holdfast_core::{Error, ReservationId, ReserveRequest, Ttl};

use super::{Body, ShopPath, body};
use crate::api::{CreateReservation, ExtendBody, ReservationBody};
use crate::auth::ShopAccess;
use crate::error::{ApiResult, ErrorBody};
use crate::metrics::reservation_outcome;
use crate::state::AppState;

/// Hold stock for a checkout.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/reservations", tag = "reservations", operation_id = "create_reservation",
    params(ShopAccess),
    request_body = CreateReservation,
    responses(
        (status = 201, description = "held", body = ReservationBody),
        (status = 200, description = "replay of the same key and lines: the existing reservation", body = ReservationBody),
        (status = 409, description = "`insufficient_stock` (nothing was held; `lines` shows what each line could have had) or `idempotency_conflict` (the key was used with other lines)", body = ErrorBody),
        (status = 422, description = "`invalid_request`, also for an item named on two lines", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    access: ShopAccess,
    req: Body<CreateReservation>,
) -> ApiResult<(StatusCode, Json<ReservationBody>)> {
    let b = body(req)?;
    let ttl = match b.ttl_seconds {
        Some(s) => Ttl::from_secs(s)?,
        None => Ttl::DEFAULT,
    };
    let lines = b.lines.into_iter().map(Into::into).collect();
    let req = ReserveRequest::new(access.shop, b.key, lines, ttl, b.allow_partial, b.allow_split)?;
    match state.store.reserve(&req).await {
        Ok(r) => {
            reservation_outcome(if r.created { "held" } else { "replayed" });
            let status = if r.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok((status, Json(r.reservation.into())))
        }
        Err(e) => {
            reservation_outcome(match e {
                Error::InsufficientStock(_) => "insufficient",
                Error::IdempotencyConflict(_) => "conflict",
                _ => "error",
            });
            Err(e.into())
        }
    }
}

/// Read a reservation.
#[utoipa::path(
    get, path = "/v1/shops/{shop}/reservations/{id}", tag = "reservations", operation_id = "get_reservation",
    params(ShopPath<ReservationId>),
    responses(
        (status = 200, description = "the reservation", body = ReservationBody),
        (status = 404, description = "`not_found`: no such reservation in this shop (or removed after the retention period)", body = ErrorBody),
    )
)]
pub async fn get(State(state): State<AppState>, p: ShopPath<ReservationId>) -> ApiResult<Json<ReservationBody>> {
    Ok(Json(state.store.get(&p.shop, p.at).await?.into()))
}

/// Payment succeeded: the held units become committed. Idempotent.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/reservations/{id}/claim", tag = "reservations", operation_id = "claim_reservation",
    params(ShopPath<ReservationId>),
    responses(
        (status = 200, description = "claimed (now, or already)", body = ReservationBody),
        (status = 404, description = "`not_found`: no such reservation in this shop", body = ErrorBody),
        (status = 409, description = "`reservation_expired` (its units went back to stock) or `invalid_state` (it was released)", body = ErrorBody),
    )
)]
pub async fn claim(State(state): State<AppState>, p: ShopPath<ReservationId>) -> ApiResult<Json<ReservationBody>> {
    Ok(Json(state.store.claim(&p.shop, p.at).await?.into()))
}

/// Payment failed or the cart was abandoned: the units go back. Idempotent.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/reservations/{id}/release", tag = "reservations", operation_id = "release_reservation",
    params(ShopPath<ReservationId>),
    responses(
        (status = 200, description = "released (now, or already; or it had expired)", body = ReservationBody),
        (status = 404, description = "`not_found`: no such reservation in this shop", body = ErrorBody),
        (status = 409, description = "`invalid_state`: it was claimed", body = ErrorBody),
    )
)]
pub async fn release(State(state): State<AppState>, p: ShopPath<ReservationId>) -> ApiResult<Json<ReservationBody>> {
    Ok(Json(state.store.release(&p.shop, p.at).await?.into()))
}

/// Move the expiry of a live hold to now + `ttl_seconds`.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/reservations/{id}/extend", tag = "reservations", operation_id = "extend_reservation",
    params(ShopPath<ReservationId>),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "the hold, with its new expiry", body = ReservationBody),
        (status = 404, description = "`not_found`: no such reservation in this shop", body = ErrorBody),
        (status = 409, description = "`reservation_expired` or `invalid_state` (it was claimed or released)", body = ErrorBody),
    )
)]
pub async fn extend(
    State(state): State<AppState>,
    p: ShopPath<ReservationId>,
    req: Body<ExtendBody>,
) -> ApiResult<Json<ReservationBody>> {
    let ttl = Ttl::from_secs(body(req)?.ttl_seconds)?;
    Ok(Json(state.store.extend(&p.shop, p.at, ttl).await?.into()))
}
