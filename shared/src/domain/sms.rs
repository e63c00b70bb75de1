//! Per-request SMS settings (sender id, origination number, price cap): validated by `request`,
//! stored on the `intent`, and the deployment's policy over them (`SmsPolicy`: a price cap a
//! request may only lower, identities from an allow-list). A leaf of the domain: it imports only
//! `phone`, never request or intent.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::phone::PhoneNumber;

/// Per-request SMS settings; absent fields fall back to the deployment's defaults.
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

/// What the deployment lets a request choose. Its price cap may only **lower** the deployment's
/// ceiling (`SmsMaxPriceUsd`); its sender id and origination number must be the deployment's own
/// or on the deployment's allow-lists (`SmsAllowedSenderIds`, `SmsAllowedOriginationNumbers`,
/// empty by default: a request then names none of its own). Intake refuses a request outside it;
/// the sender applies it again at send time, so an intent written before the deployment tightened
/// its policy is sent within the new one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmsPolicy {
    /// The deployment's own settings; its `max_price_usd` is the ceiling.
    pub defaults: SmsOptions,
    pub allowed_sender_ids: BTreeSet<String>,
    pub allowed_origination_numbers: BTreeSet<PhoneNumber>,
}

/// A request's SMS setting the deployment does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyRefusal {
    #[error("above the deployment's ceiling of {ceiling} USD per message part: a request may only lower it")]
    PriceAboveCeiling { ceiling: String },
    #[error("not a sender ID this deployment allows (its SmsSenderId or one of SmsAllowedSenderIds)")]
    SenderIdNotAllowed,
    #[error(
        "not an origination number this deployment allows (its SmsOriginationNumber or one of \
         SmsAllowedOriginationNumbers)"
    )]
    OriginationNumberNotAllowed,
}

impl PolicyRefusal {
    /// The request field refused, as intake names it.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyRefusal::PriceAboveCeiling { .. } => "sms.max_price_usd",
            PolicyRefusal::SenderIdNotAllowed => "sms.sender_id",
            PolicyRefusal::OriginationNumberNotAllowed => "sms.origination_number",
        }
    }
}

/// The settings an SMS goes out with, and what of the request's own the policy overruled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub options: SmsOptions,
    pub overruled: Vec<PolicyRefusal>,
}

/// The request's own setting unless refused; the deployment's where refused or left out.
fn pick<T: Clone>(own: &Option<T>, refused: bool, default: &Option<T>) -> Option<T> {
    if refused { default.clone() } else { own.clone().or_else(|| default.clone()) }
}

/// A price as intake accepts it ("0.50"): a positive decimal.
fn usd(price: &str) -> Option<f64> {
    price.trim().parse::<f64>().ok().filter(|p| p.is_finite() && *p > 0.0)
}

impl SmsPolicy {
    fn allows_sender_id(&self, id: &str) -> bool {
        self.defaults.sender_id.as_deref() == Some(id) || self.allowed_sender_ids.contains(id)
    }

    fn allows_origination_number(&self, n: &PhoneNumber) -> bool {
        self.defaults.origination_number.as_ref() == Some(n) || self.allowed_origination_numbers.contains(n)
    }

    /// What of a request's own settings the deployment refuses (empty: all allowed).
    pub fn refusals(&self, requested: &SmsOptions) -> Vec<PolicyRefusal> {
        let mut out = Vec::new();
        if let (Some(asked), Some(ceiling)) =
            (requested.max_price_usd.as_deref(), self.defaults.max_price_usd.as_deref())
        {
            let above = match (usd(asked), usd(ceiling)) {
                (Some(a), Some(c)) => a > c,
                // An unreadable price is never taken as under the ceiling.
                _ => true,
            };
            if above {
                out.push(PolicyRefusal::PriceAboveCeiling { ceiling: ceiling.to_owned() });
            }
        }
        if requested.sender_id.as_deref().is_some_and(|id| !self.allows_sender_id(id)) {
            out.push(PolicyRefusal::SenderIdNotAllowed);
        }
        if requested.origination_number.as_ref().is_some_and(|n| !self.allows_origination_number(n)) {
            out.push(PolicyRefusal::OriginationNumberNotAllowed);
        }
        out
    }

    /// The settings to send with: the request's own where the policy allows them, the
    /// deployment's otherwise (and for what the request left out). The price is never above the
    /// ceiling.
    pub fn effective(&self, requested: &SmsOptions) -> Effective {
        let overruled = self.refusals(requested);
        let refused = |r: fn(&PolicyRefusal) -> bool| overruled.iter().any(r);
        let options = SmsOptions {
            sender_id: pick(
                &requested.sender_id,
                refused(|r| matches!(r, PolicyRefusal::SenderIdNotAllowed)),
                &self.defaults.sender_id,
            ),
            origination_number: pick(
                &requested.origination_number,
                refused(|r| matches!(r, PolicyRefusal::OriginationNumberNotAllowed)),
                &self.defaults.origination_number,
            ),
            max_price_usd: pick(
                &requested.max_price_usd,
                refused(|r| matches!(r, PolicyRefusal::PriceAboveCeiling { .. })),
                &self.defaults.max_price_usd,
            ),
        };
        Effective { options, overruled }
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

    fn number(n: &str) -> PhoneNumber {
        PhoneNumber::parse(n).unwrap_or_else(|e| panic!("{n}: {e}"))
    }

    fn policy() -> SmsPolicy {
        SmsPolicy {
            defaults: SmsOptions {
                sender_id: Some("TOCSIN".into()),
                origination_number: Some(number("+18005550100")),
                max_price_usd: Some("0.50".into()),
            },
            allowed_sender_ids: BTreeSet::from(["OPS".to_owned()]),
            allowed_origination_numbers: BTreeSet::from([number("+18005550199")]),
        }
    }

    #[test]
    fn a_request_may_lower_the_price_ceiling_but_never_raise_it() {
        let asks = |p: &str| SmsOptions { max_price_usd: Some(p.into()), ..SmsOptions::default() };
        assert!(policy().refusals(&asks("0.10")).is_empty());
        assert!(policy().refusals(&asks("0.5")).is_empty(), "the ceiling itself");
        assert_eq!(policy().refusals(&asks("0.51")), vec![PolicyRefusal::PriceAboveCeiling { ceiling: "0.50".into() }]);
        assert_eq!(policy().effective(&asks("0.10")).options.max_price_usd.as_deref(), Some("0.10"));
        let raised = policy().effective(&asks("9.99"));
        assert_eq!(raised.options.max_price_usd.as_deref(), Some("0.50"), "sent at the ceiling");
        assert_eq!(raised.overruled.len(), 1);
    }

    #[test]
    fn without_a_ceiling_a_requests_price_cap_only_ever_lowers_the_spend() {
        let open = SmsPolicy::default();
        let asks = SmsOptions { max_price_usd: Some("2".into()), ..SmsOptions::default() };
        assert!(open.refusals(&asks).is_empty());
        assert_eq!(open.effective(&asks).options.max_price_usd.as_deref(), Some("2"));
    }

    #[test]
    fn a_request_names_only_the_deployments_own_or_allowed_identities() {
        let asks = |id: &str, n: &str| SmsOptions {
            sender_id: Some(id.into()),
            origination_number: Some(number(n)),
            max_price_usd: None,
        };
        assert!(policy().refusals(&asks("TOCSIN", "+18005550100")).is_empty(), "the deployment's own");
        assert!(policy().refusals(&asks("OPS", "+18005550199")).is_empty(), "on the allow-lists");
        assert_eq!(
            policy().refusals(&asks("PRIZE", "+447700900123")),
            vec![PolicyRefusal::SenderIdNotAllowed, PolicyRefusal::OriginationNumberNotAllowed]
        );
        let sent = policy().effective(&asks("PRIZE", "+447700900123"));
        assert_eq!(sent.options.sender_id.as_deref(), Some("TOCSIN"));
        assert_eq!(sent.options.origination_number, Some(number("+18005550100")));
        assert_eq!(sent.options.max_price_usd.as_deref(), Some("0.50"), "the ceiling applies to what was left out");
    }

    #[test]
    fn a_deployment_with_no_allow_list_lets_a_request_name_no_identity_of_its_own() {
        let closed = SmsPolicy::default();
        let asks = SmsOptions { sender_id: Some("OPS".into()), ..SmsOptions::default() };
        assert_eq!(closed.refusals(&asks), vec![PolicyRefusal::SenderIdNotAllowed]);
        assert_eq!(closed.effective(&asks).options.sender_id, None);
    }
}
