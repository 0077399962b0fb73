//! holdfast-bench's integration tests, one binary: short flash sales through
//! the legacy Redis store and over HTTP against a `holdfast serve` started in
//! this process, the mixed checkout load on two such replicas, each on a
//! database of its own on a real server, and the flags the bench refuses. A server that cannot be reached fails the test
//! loudly; nothing is skipped.

use holdfast_testkit as support;

mod churn;
mod common;
mod flags;
mod http;
mod redis;
