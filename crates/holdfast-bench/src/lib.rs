//! Load generation for holdfast: the flash sale behind `holdfast demo`, and
//! (to come) `holdfast bench` with its baselines.

pub mod flash_sale;
