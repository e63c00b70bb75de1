//! The tocsin benchmark suite. One command runs every measurement and writes `BENCHMARKS.md`:
//!
//! ```text
//! cargo run -p tocsin-bench --release --bin bench
//! ```
//!
//! One module per measurement; each returns its figures (or an error that the report prints in
//! place of the table), so one failing measurement never hides the others.
// The measured handlers' futures nest the ports' futures (the SDK's included) deeply; computing
// their layout needs more than the default 128 levels (as intake's `main.rs`).
#![recursion_limit = "256"]

pub mod api_calls;
pub mod binaries;
pub mod capacity;
pub mod carrier_month;
pub mod cold_start;
pub mod cost;
pub mod cpu;
pub mod cpu_clock;
pub mod error;
pub mod function;
pub mod idle;
pub mod machine;
pub mod merge;
pub mod probe;
pub mod python_peer;
pub mod replies;
pub mod report;
mod report_replies;
mod report_scale;
mod report_status;
mod report_storm_mode;
pub mod rss;
pub mod size;
pub mod stats;
pub mod status_rate;
pub mod storm;
pub mod storm_mode;
pub mod sweep_rate;
pub mod sweep_reads;
pub mod workload;
pub mod wru;

pub use error::{BenchError, Result};
