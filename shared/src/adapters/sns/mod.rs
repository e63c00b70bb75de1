//! Amazon SNS as the SMS provider: publishing (`gateway`) and searching the account's SMS
//! delivery-status log groups (`delivery_logs`). An SNS delivery record carries no tag of
//! tocsin's: only the message id `Publish` answered ties it to an alert.

mod delivery_logs;
mod gateway;

pub use delivery_logs::CloudWatchLogsSearch;
pub use gateway::{SnsGateway, classify_error};
