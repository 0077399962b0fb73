//! `/v1/shops/{shop}/items/{item}…`: set, adjust and fulfil the stock of an
//! (item, location); read an item's levels (plain reads, never SKIP LOCKED).

use axum::Json;
use axum::extract::State;
use holdfast_core::{ItemId, LocationId, ShopId, StockChange, StockRequest};

use super::{Body, Params, body, params};
use crate::api::{AdjustStock, FulfilStock, ItemLevelsBody, SetStock, StockBody};
use crate::auth::ShopAccess;
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

async fn change(
    state: &AppState,
    access: &ShopAccess,
    p: Params<(String, String, String)>,
    change: impl FnOnce() -> ApiResult<StockChange>,
) -> ApiResult<Json<StockBody>> {
    let (_, item, location) = params(p)?;
    let req = StockRequest::new(access.shop.clone(), ItemId::new(item)?, LocationId::new(location)?, change()?)?;
    let level = state.store.change_stock(&req).await?;
    Ok(Json(StockBody { item: req.item().to_string(), level: level.into() }))
}

/// Set `on_hand`.
#[utoipa::path(
    put, path = "/v1/shops/{shop}/items/{item}/locations/{location}", tag = "stock", operation_id = "set_stock",
    params(("shop" = ShopId, Path), ("item" = ItemId, Path), ("location" = LocationId, Path)),
    request_body = SetStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: `on_hand` would fall below what is reserved and committed", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn set(
    State(state): State<AppState>,
    access: ShopAccess,
    p: Params<(String, String, String)>,
    req: Body<SetStock>,
) -> ApiResult<Json<StockBody>> {
    change(&state, &access, p, || Ok(StockChange::Set(body(req)?.on_hand))).await
}

/// Add a delta (negative to remove) to `on_hand`.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/items/{item}/locations/{location}/adjust", tag = "stock", operation_id = "adjust_stock",
    params(("shop" = ShopId, Path), ("item" = ItemId, Path), ("location" = LocationId, Path)),
    request_body = AdjustStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: the decrease would take reserved or committed units, or `on_hand` would fall below zero", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn adjust(
    State(state): State<AppState>,
    access: ShopAccess,
    p: Params<(String, String, String)>,
    req: Body<AdjustStock>,
) -> ApiResult<Json<StockBody>> {
    change(&state, &access, p, || Ok(StockChange::Adjust(body(req)?.delta))).await
}

/// Ship committed units: `on_hand` and `committed` both fall.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/items/{item}/locations/{location}/fulfil", tag = "stock", operation_id = "fulfil_stock",
    params(("shop" = ShopId, Path), ("item" = ItemId, Path), ("location" = LocationId, Path)),
    request_body = FulfilStock,
    responses(
        (status = 200, description = "the (item, location) afterwards", body = StockBody),
        (status = 409, description = "`stock_conflict`: fewer committed units than that", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn fulfil(
    State(state): State<AppState>,
    access: ShopAccess,
    p: Params<(String, String, String)>,
    req: Body<FulfilStock>,
) -> ApiResult<Json<StockBody>> {
    change(&state, &access, p, || Ok(StockChange::Fulfil(body(req)?.quantity))).await
}

/// Quantities of an item per location.
#[utoipa::path(
    get, path = "/v1/shops/{shop}/items/{item}", tag = "stock", operation_id = "item_levels",
    params(("shop" = ShopId, Path), ("item" = ItemId, Path)),
    responses((status = 200, description = "the item's quantities per location", body = ItemLevelsBody)),
    security(("bearer" = []))
)]
pub async fn levels(
    State(state): State<AppState>,
    access: ShopAccess,
    p: Params<(String, String)>,
) -> ApiResult<Json<ItemLevelsBody>> {
    let item = ItemId::new(params(p)?.1)?;
    Ok(Json(state.store.levels(&access.shop, &item).await?.into()))
}
