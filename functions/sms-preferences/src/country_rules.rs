//! The stack's country allow-list as End User Messaging enforces it: the custom resource
//! `Custom::SmsCountryRules`, handled by the `sms-country-rules` binary.
//!
//! A protect configuration allows every country until told otherwise ("By default all country
//! rule sets for each capability are set to ALLOW"), and CloudFormation cannot compute "every
//! country but these" from a parameter. So the template makes the protect configuration
//! (`AWS::SMSVOICE::ProtectConfiguration`, associated with the stack's configuration set and named
//! on every send), and this resource reads its SMS rule set — every country AWS lists — and sets
//! each one to BLOCK but the `SmsAllowedCountries`, which it sets to ALLOW. A send to a blocked
//! country is refused by AWS before any carrier sees it (`ConflictException`
//! `DESTINATION_COUNTRY_BLOCKED_BY_PROTECT_CONFIGURATION`): the alert fails with that reason and
//! on-call is told, and no request, producer or stolen sender credential spends money there.
//!
//! **The values are the stack's, never the event's**, as for the SMS preferences: the protect
//! configuration and the allowed countries come from the function's environment
//! (`TOCSIN_PROTECT_CONFIGURATION_ID`, `TOCSIN_SMS_ALLOWED_COUNTRIES`); an event's properties
//! only tell it that the stack changed, and a value there that differs is ignored and logged.
//!
//! Delete leaves the rules in place and answers SUCCESS: the protect configuration is the
//! template's own resource and is deleted with the stack, after this one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tocsin::config::{ConfigError, Env};

use crate::{
    Decision, Envelope, Invocation, Response, ResponseUrl, RetryPolicy, SetError, SmsPreferencesError, answer_request,
    with_retry,
};

/// The stack's protect configuration (`!Ref SmsProtectConfiguration`).
pub const PROTECT_CONFIGURATION_VAR: &str = "TOCSIN_PROTECT_CONFIGURATION_ID";
/// The stack's `SmsAllowedCountries`: ISO 3166-1 alpha-2 codes, comma-separated.
pub const ALLOWED_COUNTRIES_VAR: &str = "TOCSIN_SMS_ALLOWED_COUNTRIES";
/// Fewer countries than this in a rule set is not a whole rule set: AWS lists every country it
/// can send to (over 200). Blocking "all the others" of a partial list would leave the rest open,
/// so the function refuses to call that done.
pub const MIN_RULE_SET_COUNTRIES: usize = 100;
/// The model's limit on one `UpdateProtectConfigurationCountryRuleSet` (map of at most 300).
const MAX_UPDATES_PER_CALL: usize = 300;

/// A protect configuration's status for one country (the API's `ProtectStatus`).
pub const ALLOW: &str = "ALLOW";
pub const BLOCK: &str = "BLOCK";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCountries {
    #[error(
        "{ALLOWED_COUNTRIES_VAR} must list ISO 3166-1 alpha-2 country codes separated by commas (e.g. US,CA,GB), got {0:?}"
    )]
    Format(String),
    #[error("{PROTECT_CONFIGURATION_VAR} must be a protect configuration id or ARN, got {0:?}")]
    ProtectConfiguration(String),
}

/// The countries the stack may text: at least one, each two capital letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedCountries(BTreeSet<String>);

impl AllowedCountries {
    pub fn parse(raw: &str) -> Result<Self, InvalidCountries> {
        let codes: BTreeSet<String> = raw.split(',').map(|c| c.trim().to_owned()).collect();
        let valid = |c: &String| c.len() == 2 && c.bytes().all(|b| b.is_ascii_uppercase());
        if raw.trim().is_empty() || !codes.iter().all(valid) {
            return Err(InvalidCountries::Format(raw.to_owned()));
        }
        Ok(AllowedCountries(codes))
    }

    pub fn contains(&self, iso: &str) -> bool {
        self.0.contains(iso)
    }

    pub fn joined(&self) -> String {
        self.0.iter().map(String::as_str).collect::<Vec<_>>().join(",")
    }
}

/// The stack's country rules: which protect configuration, which countries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountryRules {
    pub protect_configuration_id: String,
    pub allowed: AllowedCountries,
}

/// Why a rule set cannot be brought to the stack's rules (nothing is changed then).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSetError {
    #[error(
        "SmsAllowedCountries names {}, which End User Messaging does not list as a country it can send to (ISO 3166-1 alpha-2: the United Kingdom is GB, not UK)",
        .0.join(", ")
    )]
    UnknownCountries(Vec<String>),
    #[error(
        "End User Messaging listed only {0} countries in the protect configuration's SMS rule set; a whole rule set lists over {MIN_RULE_SET_COUNTRIES}, and blocking the others of a partial one would leave countries open"
    )]
    Partial(usize),
}

impl CountryRules {
    /// The rules from the function's environment, read at start-up: both variables required.
    pub fn from_env(env: &mut Env) -> Result<Self, ConfigError> {
        let id = env.required(PROTECT_CONFIGURATION_VAR);
        let countries = env.required(ALLOWED_COUNTRIES_VAR);
        if !id.is_empty() && !is_protect_configuration(&id) {
            env.invalid(InvalidCountries::ProtectConfiguration(id.clone()).to_string());
        }
        if !countries.is_empty()
            && let Err(e) = AllowedCountries::parse(&countries)
        {
            env.invalid(e.to_string());
        }
        std::mem::replace(env, Env::from_map(HashMap::new())).finish()?;
        let allowed = AllowedCountries::parse(&countries).map_err(|e| ConfigError(vec![e.to_string()]))?;
        Ok(CountryRules { protect_configuration_id: id, allowed })
    }

    /// What to change in `current` (country → status, as AWS lists it) so that the allowed
    /// countries are ALLOW and every other listed country is BLOCK: only the countries whose
    /// status differs. MONITOR and FILTER count as not blocked.
    pub fn updates(&self, current: &BTreeMap<String, String>) -> Result<BTreeMap<String, &'static str>, RuleSetError> {
        let unknown: Vec<String> = self.allowed.0.iter().filter(|c| !current.contains_key(*c)).cloned().collect();
        if !unknown.is_empty() {
            return Err(RuleSetError::UnknownCountries(unknown));
        }
        if current.len() < MIN_RULE_SET_COUNTRIES {
            return Err(RuleSetError::Partial(current.len()));
        }
        Ok(current
            .iter()
            .filter_map(|(iso, status)| {
                let wanted = if self.allowed.contains(iso) { ALLOW } else { BLOCK };
                (status != wanted).then_some((iso.clone(), wanted))
            })
            .collect())
    }

    /// The event's properties that differ from the stack's values (and are therefore ignored).
    pub fn ignored_in(&self, p: &CountryRulesProperties) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(id) = p.protect_configuration_id.as_deref()
            && id.trim() != self.protect_configuration_id
        {
            out.push(("ProtectConfigurationId", format!("(not shown: {} characters)", id.chars().count())));
        }
        if let Some(c) = p.allowed_countries.as_deref()
            && AllowedCountries::parse(c).ok().as_ref() != Some(&self.allowed)
        {
            // Country codes are not personal data, but the event is anyone's text: shown only
            // when it is a list of codes.
            let shown = AllowedCountries::parse(c)
                .map_or_else(|_| format!("(not shown: {} characters)", c.chars().count()), |a| a.joined());
            out.push(("AllowedCountries", shown));
        }
        out
    }
}

/// `protect-…` or its ARN (the API's `ProtectConfigurationIdOrArn`: `[A-Za-z0-9_:/-]+`, 1–256).
fn is_protect_configuration(s: &str) -> bool {
    (1..=256).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_:/-".contains(&b))
}

/// The resource's properties, as CloudFormation passes them: change triggers only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CountryRulesProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect_configuration_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_countries: Option<String>,
}

pub type CountryRulesRequest =
    aws_lambda_events::cloudformation::CloudFormationCustomResourceRequest<Value, CountryRulesProperties>;

/// Port: a protect configuration's SMS country rule set.
pub trait ProtectConfigurations: Send + Sync {
    /// Every country of the SMS rule set, with its status.
    fn sms_rule_set(&self, id: &str) -> impl Future<Output = Result<BTreeMap<String, String>, SetError>> + Send;
    /// Sets these countries' statuses (at most 300 per call).
    fn update_sms_rules(
        &self,
        id: &str,
        updates: &BTreeMap<String, &'static str>,
    ) -> impl Future<Output = Result<(), SetError>> + Send;
}

/// What a Delete answers.
const LEFT_IN_PLACE: &str = "country rules left in place: the protect configuration is the stack's and goes with it";

pub struct SmsCountryRules<P, R> {
    pub protect: P,
    pub responder: R,
    /// The stack's rules, read at start-up ([`CountryRules::from_env`]); an error is answered
    /// FAILED on every Create and Update, naming it.
    pub rules: Result<CountryRules, ConfigError>,
    pub physical_id: String,
    pub retry: RetryPolicy,
}

impl<P: ProtectConfigurations, R: ResponseUrl> SmsCountryRules<P, R> {
    /// `tocsin-sms-country-rules-<region>`: stable, so an answer never turns into a replacement.
    pub fn physical_id_in(region: &str) -> String {
        format!("tocsin-sms-country-rules-{region}")
    }

    /// The Lambda entry point: the answer sent to CloudFormation; an error only when no answer
    /// could be delivered.
    pub async fn handle(&self, event: Value, invocation: &Invocation) -> Result<Response, SmsPreferencesError> {
        let decide =
            |event, envelope: Envelope| Box::pin(async move { self.decide(event, &envelope, invocation).await });
        Box::pin(answer_request(&self.responder, &self.retry, &self.physical_id, event, invocation, decide)).await
    }

    async fn decide(&self, event: Value, envelope: &Envelope, invocation: &Invocation) -> Decision {
        if envelope.request_type.as_deref() == Some("Delete") {
            return Decision::LeftInPlace(LEFT_IN_PLACE);
        }
        let properties = match serde_json::from_value::<CountryRulesRequest>(event) {
            Ok(CountryRulesRequest::Create(c)) => c.resource_properties,
            Ok(CountryRulesRequest::Update(u)) => u.resource_properties,
            Ok(CountryRulesRequest::Delete(_)) => return Decision::LeftInPlace(LEFT_IN_PLACE),
            Ok(_) => return Decision::Failed("unsupported RequestType".into()),
            Err(e) => return Decision::Failed(format!("malformed custom resource request: {e}")),
        };
        let rules = match &self.rules {
            Ok(r) => r,
            Err(e) => {
                return Decision::Failed(format!("the function's configuration is invalid, nothing was set: {e}"));
            }
        };
        for (property, event_value) in rules.ignored_in(&properties) {
            tracing::warn!(
                request_id = ?envelope.request_id,
                property,
                event_value = %event_value,
                applied = %rules.allowed.joined(),
                "the event asks for a value the stack does not set: ignored, the stack's value is applied"
            );
        }
        let id = rules.protect_configuration_id.as_str();
        let current = match with_retry("GetProtectConfigurationCountryRuleSet", &self.retry, invocation, || {
            self.protect.sms_rule_set(id)
        })
        .await
        {
            Ok(c) => c,
            Err(reason) => return Decision::Failed(reason),
        };
        let updates = match rules.updates(&current) {
            Ok(u) => u,
            Err(e) => return Decision::Failed(format!("nothing was changed: {e}")),
        };
        let keys: Vec<&String> = updates.keys().collect();
        for chunk in keys.chunks(MAX_UPDATES_PER_CALL) {
            let part: BTreeMap<String, &'static str> = chunk.iter().map(|k| ((*k).clone(), updates[*k])).collect();
            if let Err(reason) = with_retry("UpdateProtectConfigurationCountryRuleSet", &self.retry, invocation, || {
                self.protect.update_sms_rules(id, &part)
            })
            .await
            {
                return Decision::Failed(reason);
            }
        }
        let blocked = current.len() - rules.allowed.0.len();
        let reason = format!(
            "SMS allowed to {} only; the {blocked} other countries blocked ({} changed)",
            rules.allowed.joined(),
            updates.len()
        );
        tracing::info!(allowed = %rules.allowed.joined(), blocked, changed = updates.len(), "country rules applied");
        let data = BTreeMap::from([
            ("AllowedCountries".to_owned(), rules.allowed.joined()),
            ("BlockedCountries".to_owned(), blocked.to_string()),
        ]);
        Decision::Applied { reason, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allowed: &str) -> CountryRules {
        CountryRules {
            protect_configuration_id: "protect-1".into(),
            allowed: AllowedCountries::parse(allowed).expect("allowed"),
        }
    }

    /// A whole rule set: `n` countries `A0`…, plus US, CA and GB, each with `status`.
    fn rule_set(n: usize, status: &str) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> = (0..n)
            .map(|i| (format!("{}{}", (b'A' + (i / 26) as u8) as char, (b'A' + (i % 26) as u8) as char), status.into()))
            .collect();
        for c in ["US", "CA", "GB"] {
            m.insert(c.into(), status.into());
        }
        m
    }

    #[test]
    fn allowed_countries_are_iso_codes_and_anything_else_is_refused_not_guessed() {
        assert_eq!(AllowedCountries::parse("US, CA,US").expect("list").joined(), "CA,US");
        for bad in ["", "us", "USA", "US;CA", "U1", "US,,CA"] {
            assert!(AllowedCountries::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_country_but_the_allowed_ones_is_blocked_and_the_allowed_are_allowed() {
        let current = rule_set(200, ALLOW);
        let updates = rules("US,CA").updates(&current).expect("updates");
        assert_eq!(updates.len(), current.len() - 2);
        assert!(updates.values().all(|s| *s == BLOCK));
        assert!(!updates.contains_key("US") && !updates.contains_key("CA"));
        // A country set to BLOCK earlier but now allowed is opened again.
        let mut blocked = rule_set(200, BLOCK);
        blocked.insert("ZZ".into(), MONITOR_FOR_TEST.into());
        let updates = rules("US").updates(&blocked).expect("updates");
        assert_eq!(updates.get("US"), Some(&ALLOW));
        assert_eq!(updates.get("ZZ"), Some(&BLOCK), "MONITOR is not blocked");
        assert_eq!(updates.len(), 2);
    }

    const MONITOR_FOR_TEST: &str = "MONITOR";

    #[test]
    fn rules_already_in_place_change_nothing() {
        let mut current = rule_set(200, BLOCK);
        current.insert("US".into(), ALLOW.into());
        assert!(rules("US").updates(&current).expect("updates").is_empty());
    }

    #[test]
    fn a_country_aws_does_not_list_fails_clearly_and_changes_nothing() {
        let err = rules("US,UK").updates(&rule_set(200, ALLOW)).expect_err("UK is not ISO");
        assert_eq!(err, RuleSetError::UnknownCountries(vec!["UK".into()]));
        assert!(err.to_string().contains("GB, not UK"), "{err}");
    }

    #[test]
    fn a_rule_set_that_lists_too_few_countries_is_not_trusted_to_block_the_rest() {
        let err = rules("US").updates(&rule_set(10, ALLOW)).expect_err("partial");
        assert_eq!(err, RuleSetError::Partial(13));
    }

    #[test]
    fn the_rules_come_from_the_environment_and_a_missing_or_bad_variable_is_named() {
        let env = |vars: &[(&str, &str)]| {
            Env::from_map(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
        };
        let ok = CountryRules::from_env(&mut env(&[
            (PROTECT_CONFIGURATION_VAR, "protect-abc"),
            (ALLOWED_COUNTRIES_VAR, "US,CA"),
        ]))
        .expect("rules");
        assert_eq!(
            ok,
            CountryRules { protect_configuration_id: "protect-abc".into(), allowed: rules("CA,US").allowed }
        );
        let missing = CountryRules::from_env(&mut env(&[])).expect_err("missing").to_string();
        assert!(missing.contains(PROTECT_CONFIGURATION_VAR) && missing.contains(ALLOWED_COUNTRIES_VAR), "{missing}");
        let bad = CountryRules::from_env(&mut env(&[
            (PROTECT_CONFIGURATION_VAR, "protect-abc"),
            (ALLOWED_COUNTRIES_VAR, "uk"),
        ]))
        .expect_err("bad")
        .to_string();
        assert!(bad.contains(ALLOWED_COUNTRIES_VAR), "{bad}");
    }

    #[test]
    fn an_event_asking_for_more_countries_is_reported_as_ignored() {
        let r = rules("US");
        let p = CountryRulesProperties {
            service_token: None,
            protect_configuration_id: Some("protect-1".into()),
            allowed_countries: Some("US,NG,ZW".into()),
        };
        assert_eq!(r.ignored_in(&p), vec![("AllowedCountries", "NG,US,ZW".to_owned())]);
        let same = CountryRulesProperties { allowed_countries: Some("US".into()), ..p };
        assert!(r.ignored_in(&same).is_empty());
    }
}
