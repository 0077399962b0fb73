//! The `Store` trait: every operation (reserve, claim, release, extend, expire,
//! stock changes, levels, audit), implemented once per backend
//! and exercised by one shared conformance suite.

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{ItemId, ReservationId, ShopId, Ttl};
use crate::model::{
    AuditReport, ItemLevels, LocationLevel, Reservation, ReserveRequest, Reserved, StockRequest, StoreStats, Unswept,
};

/// Which kind of database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Postgres,
    MySql,
    Sqlite,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::Sqlite => "sqlite",
        }
    }
}

/// What a claim, release or extend asks of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    Claim,
    Release,
    Extend(Ttl),
}

impl Settle {
    /// The operation: `claim`, `release` or `extend`.
    pub fn name(self) -> &'static str {
        match self {
            Settle::Claim => "claim",
            Settle::Release => "release",
            Settle::Extend(_) => "extend",
        }
    }

    /// What it does to a hold, as a refusal names it: `claimed`, `released`
    /// or `extended`.
    pub fn verb(self) -> &'static str {
        match self {
            Settle::Claim => "claimed",
            Settle::Release => "released",
            Settle::Extend(_) => "extended",
        }
    }

    /// Asks `store` for it.
    pub async fn on(self, store: &dyn Store, shop: &ShopId, id: ReservationId) -> Result<Reservation> {
        match self {
            Settle::Claim => store.claim(shop, id).await,
            Settle::Release => store.release(shop, id).await,
            Settle::Extend(ttl) => store.extend(shop, id, ttl).await,
        }
    }
}

#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    fn backend(&self) -> Backend;

    /// Creates or upgrades the schema. Idempotent.
    async fn migrate(&self) -> Result<()>;

    /// Holds the units of `req` (all or nothing unless `allow_partial`).
    /// A replay of the same key and lines returns the existing reservation.
    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved>;

    /// Payment succeeded: reserved becomes committed. Idempotent.
    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation>;

    /// Payment failed or the cart was abandoned: the units go back. Idempotent.
    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation>;

    /// Moves the expiry of a live hold to now + `ttl`.
    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation>;

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation>;

    /// One sweep: releases up to `limit` holds past their expiry and returns
    /// how many. Safe to run from any number of processes at once.
    async fn expire(&self, limit: u32) -> Result<u64>;

    /// Holds past their expiry that no sweep has released yet, read from
    /// the database (the sweeper's metrics), or `None` from a store that
    /// keeps no such table (the legacy Redis store, a remote service).
    async fn unswept(&self) -> Result<Option<Unswept>>;

    /// One retention pass: deletes up to `limit` finished reservations
    /// (claimed, released or expired, and folded into the ledger) that last
    /// changed more than `older_than` ago, with their lines, and returns how
    /// many. Quantities do not change; a removed reservation's id answers
    /// `not_found` and its idempotency key is free again. Safe to run from
    /// any number of processes at once.
    async fn purge(&self, older_than: std::time::Duration, limit: u32) -> Result<u64>;

    /// Sets, adjusts or fulfils the stock of one (item, location).
    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel>;

    /// Quantities of an item per location, from plain (non-locking) reads.
    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels>;

    /// Checks the accounting invariant for one shop or all of them.
    async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport>;

    fn stats(&self) -> StoreStats;
}
