//! The domain core: what an alert intent is, how it is validated, keyed and rendered, the state
//! machine it moves through, how SNS delivery-status records are read and classified, and what the
//! scheduled sweep decides. Pure: no AWS, no I/O, time passed in.

pub mod carrier;
pub mod carrier_traffic;
pub mod delivery;
pub mod digest_id;
pub mod intent;
pub mod key;
pub mod observation;
pub mod phone;
pub mod provider;
pub mod reconcile;
pub mod request;
pub mod segments;
pub mod sms;
pub mod state;
pub mod storm;
pub mod sweep;
pub mod template;

pub use intent::{Intent, IntentRecord, Origin, SmsOptions};
pub use key::IdempotencyKey;
pub use phone::PhoneNumber;
pub use state::State;
