//! The `holdfast` binary's integration tests: the real executable as a
//! separate process, on a database of its own per test.

mod console;
mod crash;
mod pods;
mod serve;
mod tls;
mod worker;
