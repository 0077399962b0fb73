//! Schema migrations: numbered SQL files per dialect, applied in order and
//! recorded in `holdfast_migrations`, so `holdfast migrate` is idempotent.

/// One schema step of one dialect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}
