//! Per-request SNS settings (sender id, origination number, price cap): validated by `request`,
//! stored on the `intent`. A leaf of the domain: it imports only `phone`, never request or intent.

use serde::{Deserialize, Serialize};

use super::phone::PhoneNumber;

/// Per-request SNS settings; absent fields fall back to the deployment's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmsOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origination_number: Option<PhoneNumber>,
    /// Decimal USD as given, e.g. "0.50".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_usd: Option<String>,
}

impl SmsOptions {
    /// The request's own settings, each falling back to the deployment's default.
    pub fn or_defaults(&self, defaults: &SmsOptions) -> SmsOptions {
        SmsOptions {
            sender_id: self.sender_id.clone().or_else(|| defaults.sender_id.clone()),
            origination_number: self.origination_number.clone().or_else(|| defaults.origination_number.clone()),
            max_price_usd: self.max_price_usd.clone().or_else(|| defaults.max_price_usd.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_own_sms_settings_win_over_the_deployment_defaults() {
        let defaults = SmsOptions {
            sender_id: Some("TOCSIN".into()),
            origination_number: None,
            max_price_usd: Some("0.5".into()),
        };
        let request = SmsOptions { sender_id: Some("OPS".into()), origination_number: None, max_price_usd: None };
        let merged = request.or_defaults(&defaults);
        assert_eq!(merged.sender_id.as_deref(), Some("OPS"));
        assert_eq!(merged.max_price_usd.as_deref(), Some("0.5"));
        assert_eq!(merged.origination_number, None);
    }
}
