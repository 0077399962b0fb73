//! `/v1/shops/{shop}/items/{item}…`: set, adjust and fulfil the stock of an
//! (item, location); read an item's levels (plain reads, never SKIP LOCKED).

use axum::Json;
use axum::extract::State;
use holdfast_core::{ItemId, LocationId, StockChange, StockRequest};

use super::{Body, ShopPath, body};
use crate::api::{AdjustStock, FulfilStock, ItemLevelsBody, SetStock, StockBody};
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

/// An (item, location) of the shop: the path of the stock-change routes.
type Place = ShopPath<(ItemId, LocationId)>;

async fn change(state: &AppState, p: Place, change: ApiResult<StockChange>) -> ApiResult<Json<StockBody>> {
    let (item, location) = p.at;
    let req = StockRequest::new(p.shop, item, location, change?)?;
    let level = state.store.change_stock(&req).await?;
    Ok(Json(StockBody { item: req.item().to_string(), level: level.into() }))
}

/// Set `on_hand`.
#[utoipa::path(
    put, path = "/v1/shops/{shop}/items/{item}/locations/{location}", tag = "stock", operation_id = "set_stock",
    params(Place),
    request_body = SetStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: `on_hand` would fall below what is reserved and committed", body = ErrorBody),
    )
)]
pub async fn set(State(state): State<AppState>, p: Place, req: Body<SetStock>) -> ApiResult<Json<StockBody>> {
    change(&state, p, body(req).map(|b| StockChange::Set(b.on_hand))).await
}

/// Add a delta (negative to remove) to `on_hand`.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/items/{item}/locations/{location}/adjust", tag = "stock", operation_id = "adjust_stock",
    params(Place),
    request_body = AdjustStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: the decrease would take reserved or committed units, or `on_hand` would fall below zero", body = ErrorBody),
    )
)]
pub async fn adjust(State(state): State<AppState>, p: Place, req: Body<AdjustStock>) -> ApiResult<Json<StockBody>> {
    change(&state, p, body(req).map(|b| StockChange::Adjust(b.delta))).await
}

/// Ship committed units: `on_hand` and `committed` both fall.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/items/{item}/locations/{location}/fulfil", tag = "stock", operation_id = "fulfil_stock",
    params(Place),
    request_body = FulfilStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: fewer committed units than that", body = ErrorBody),
    )
)]
pub async fn fulfil(State(state): State<AppState>, p: Place, req: Body<FulfilStock>) -> ApiResult<Json<StockBody>> {
    change(&state, p, body(req).map(|b| StockChange::Fulfil(b.quantity))).await
}

/// Quantities of an item per location.
#[utoipa::path(
    get, path = "/v1/shops/{shop}/items/{item}", tag = "stock", operation_id = "item_levels",
    params(ShopPath<ItemId>),
    responses((status = 200, description = "the item's quantities per location", body = ItemLevelsBody))
)]
pub async fn levels(State(state): State<AppState>, p: ShopPath<ItemId>) -> ApiResult<Json<ItemLevelsBody>> {
    Ok(Json(state.store.levels(&p.shop, &p.at).await?.into()))
}
