//! The emulator tests, one module per file, in one test binary (see `tests/Cargo.toml`): the real
//! functions, adapters and SDK clients against moto (and the End User Messaging stand-in) behind
//! the IAM gate. Run one file's tests with `cargo test -p tocsin-tests --test integration intake::`.

mod acknowledgement;
mod api_documents;
mod aws_is_harsher;
mod canary;
mod carrier_traffic;
mod carriers;
mod chains;
mod deploy;
mod end_user_messaging;
mod escalation;
mod foreign_traffic;
mod iam;
mod intake;
mod local_env;
mod pipeline;
mod producers;
mod receipt_window;
mod reconcile;
mod recovery;
mod replies;
mod reply_codes;
mod roster;
mod sender;
mod spend_breaker;
mod status;
mod storm;
mod storm_digest;
mod template;
mod translated_template;
mod urgent_lane;
