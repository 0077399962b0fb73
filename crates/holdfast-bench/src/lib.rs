//! Load generation for holdfast: the flash sale behind `holdfast demo` and
//! `holdfast bench`, the targets it runs against (any `Store` — holdfast
//! itself, the legacy Redis store — the baselines, and a running `holdfast
//! serve` over HTTP), the latency proxy and the SVG plots.

pub mod baseline;
pub mod bench;
pub mod churn;
pub mod flash_sale;
pub mod http;
pub mod latency;
pub mod matrix;
pub mod proxy;
pub mod svg;
pub mod target;
pub mod verify;
pub mod webhooks;
