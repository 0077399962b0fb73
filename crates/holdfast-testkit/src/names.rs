//! Short constructors for the domain's validated names and requests; they
//! panic on a bad value, which in a test is a bug in the test.

use holdfast_core::{
    Error, IdempotencyKey, ItemId, Line, LocationId, LocationLevel, Quantities, Quantity, ReserveRequest, ShopId,
    StockChange, StockRequest, Store, Ttl,
};

pub fn shop(s: &str) -> ShopId {
    ShopId::new(s).unwrap()
}

pub fn item(s: &str) -> ItemId {
    ItemId::new(s).unwrap()
}

pub fn loc(s: &str) -> LocationId {
    LocationId::new(s).unwrap()
}

pub fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::new(s).unwrap()
}

/// A cart line: `qty` of item `i`, from `locations` in that order (`None`:
/// every location that stocks it).
pub fn line(i: &str, qty: i64, locations: Option<&[&str]>) -> Line {
    Line {
        item: item(i),
        quantity: Quantity::new(qty).unwrap(),
        locations: locations.map(|v| v.iter().map(|l| loc(l)).collect()),
    }
}

/// An all-or-nothing request with the default TTL.
pub fn request(s: &str, k: &str, lines: Vec<Line>) -> ReserveRequest {
    ReserveRequest::new(shop(s), key(k), lines, Ttl::DEFAULT, false, false).unwrap()
}

/// Sets `on_hand` of (item, location).
pub async fn stock(store: &dyn Store, s: &str, i: &str, l: &str, on_hand: i64) {
    change(store, s, i, l, StockChange::Set(on_hand)).await.expect("stock set");
}

/// The quantities of (item, location) in `store`.
pub async fn qty(store: &dyn Store, s: &str, i: &str, l: &str) -> Quantities {
    let levels = store.levels(&shop(s), &item(i)).await.expect("levels");
    levels.locations.into_iter().find(|x| x.location == loc(l)).expect("location present").quantities
}

/// Changes the stock of (item, location). A change out of range is refused
/// as `invalid` before it can reach the store.
pub async fn change(store: &dyn Store, s: &str, i: &str, l: &str, change: StockChange) -> Result<LocationLevel, Error> {
    store.change_stock(&StockRequest::new(shop(s), item(i), loc(l), change)?).await
}
