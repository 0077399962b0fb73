//! holdfast-sql's integration tests: one binary (one link step), the shared
//! conformance suite run against every backend on real servers.

mod conformance;
mod conn_tags;
mod mysql_locks;
mod support;
