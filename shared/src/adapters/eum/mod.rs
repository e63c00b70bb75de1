//! AWS End User Messaging SMS (`pinpoint-sms-voice-v2`) as the SMS provider: sending with the
//! alert's key and attempt in the message's `Context` (`gateway`), and searching the stack's own
//! event log group for an alert's events by that key (`events`). Every event of a message echoes
//! its context, so a delivery event names its alert exactly — never a guess by number and time.

mod events;
mod gateway;

pub use events::EumEventSearch;
pub use gateway::{EumGateway, classify_error, is_in_opt_out_list, max_price, time_to_live};
