//! AWS adapters: the only modules that name the AWS SDKs. Each implements ports from
//! [`crate::ports`].

pub mod carriers;
pub mod chain_policies;
pub mod commit;
pub mod eum;
pub mod ledger;
mod publish_errors;
pub mod registry;
pub mod roster;
pub mod sdk;
pub mod sms;
pub mod sns;
pub mod sqs;

/// Renders an SDK error with its source chain (service code and message included).
pub(crate) fn describe<E: std::error::Error>(e: &E) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
