//! The domain core: what an alert intent is, how it is validated, keyed and rendered, the state
//! machine it moves through, how delivery records (SNS logs, End User Messaging events) are read
//! and classified, what an SMS says about itself (its send context), and what the scheduled sweep
//! decides. Pure: no AWS, no I/O, time passed in.

pub mod acknowledgement;
pub mod carrier;
pub mod carrier_traffic;
pub mod chain;
pub mod chain_policy;
pub mod delivery;
pub mod digest_id;
pub mod escalation_cap;
pub mod eum_status;
pub mod intent;
pub mod key;
pub mod observation;
pub mod phone;
pub mod producer;
pub mod provider;
pub mod reconcile;
pub mod refusal;
pub mod reply;
pub mod request;
pub mod roster;
pub mod segments;
pub mod send_context;
pub mod sms;
pub mod spend;
pub mod state;
pub mod storm;
pub mod sweep;
pub mod template;

pub use intent::{Intent, IntentRecord, Origin, SmsOptions};
pub use key::IdempotencyKey;
pub use phone::PhoneNumber;
pub use state::State;
