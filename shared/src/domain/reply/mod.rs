//! Replies: what a person texts back to an alert, read defensively and decided on purely (issue 37,
//! docs/acknowledgement.md). Three concerns, one file each:
//!
//! - [`payload`]: End User Messaging's two-way payload (the JSON its number publishes to the
//!   stack's two-way topic), with or without SNS's envelope around it.
//! - [`command`]: what the words mean — acknowledge one alert by its code, the most recent one,
//!   all of them; opt out (the words AWS and the carriers act on, whatever we think of them); opt
//!   back in; help; nothing we understand.
//! - [`code`]: the short reply codes ("Reply 7 to ack") a phone holds, one per open alert (or
//!   digest), which one a new alert gets, and which alerts a command reaches — never one whose SMS
//!   the phone was not sent before it replied.
//! - [`prompt`]: the words an SMS adds to ask for a reply (plain GSM-7, no opt-out word).
//!
//! Nothing here knows AWS or the ledger; the handler that applies a reply lives beside the other
//! functions and writes through the ports.

pub mod code;
pub mod command;
pub mod confirmation;
pub mod payload;
pub mod prompt;

pub use code::{AckSubject, HeldCode, ReplyCode, Resolution, awaiting_arrival, read_before, resolve};
pub use command::{AckTarget, Command};
pub use payload::{InboundReply, PayloadError};
