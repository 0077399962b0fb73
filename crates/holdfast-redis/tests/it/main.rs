//! holdfast-redis integration tests: one binary, real Redis, real
//! PostgreSQL and MariaDB. Each test has its own SQL database and its own
//! Redis key prefix (or its own redis-server, when it stops Redis). The
//! shared conformance suite runs against the legacy store and the mode
//! router in each mode.

mod faults;
mod legacy_flaw;
mod modes;
mod support;

use holdfast_core::{Backend, Mode};
use holdfast_testkit::{Subject, conformance_suite};

mod legacy_postgres {
    super::conformance_suite!(super::Subject::Legacy(super::Backend::Postgres));
}

mod legacy_mysql {
    super::conformance_suite!(super::Subject::Legacy(super::Backend::MySql));
}

/// The legacy store on a Redis that speaks TLS only (`rediss://`, verified
/// against the test CA), its ledger over TLS too.
mod legacy_tls {
    super::conformance_suite!(super::Subject::LegacyTls(super::Backend::Postgres));
}

mod router_redis {
    super::conformance_suite!(super::Subject::Router(super::Mode::Redis, super::Backend::Postgres));
}

mod router_shadow {
    super::conformance_suite!(super::Subject::Router(super::Mode::Shadow, super::Backend::Postgres));
}

mod router_sql_primary {
    super::conformance_suite!(super::Subject::Router(super::Mode::SqlPrimary, super::Backend::MySql));
}

mod router_sql {
    super::conformance_suite!(super::Subject::Router(super::Mode::Sql, super::Backend::Postgres));
}
