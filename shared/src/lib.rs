//! tocsin's shared crate: the domain core, the ports the functions depend on, the AWS adapters
//! that implement them, typed configuration and telemetry.
//!
//! Imports flow one way: functions → adapters → ports → domain. [`domain`] knows nothing of AWS
//! and does no I/O; [`adapters`] are the only modules that name the AWS SDKs.

pub mod adapters;
pub mod config;
pub mod domain;
pub mod ports;
pub mod services;
pub mod telemetry;
