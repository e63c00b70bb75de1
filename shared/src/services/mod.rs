//! Application services: domain rules applied through ports, shared by several functions.
//! Generic over the ports, so they run the same against AWS, the emulator or in-memory fakes.

pub mod acknowledging;
pub mod operator;
pub mod receipts;
pub mod reconcile;
pub mod refreshed;
pub mod reply_codes;
pub mod roster;
