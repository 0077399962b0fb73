//! Load generation for holdfast: the flash sale behind `holdfast demo` and
//! `holdfast bench`, the targets it runs against (holdfast itself and the
//! baselines), and the latency proxy.

pub mod baseline;
pub mod bench;
pub mod conn;
pub mod flash_sale;
pub mod http;
pub mod matrix;
pub mod proxy;
pub mod svg;
pub mod target;
