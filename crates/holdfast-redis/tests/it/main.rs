//! holdfast-redis integration tests: one binary, real Redis, real
//! PostgreSQL and MariaDB. Each test has its own SQL database and its own
//! Redis key prefix (or its own redis-server, when it stops Redis).

mod faults;
mod legacy_flaw;
mod legacy_store;
mod modes;
mod support;
