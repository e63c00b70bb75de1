//! Template chain policies (issue 37, docs/acknowledgement.md "A template's chain"): the
//! escalation chain an alert of a template gets when its request names none. A deployment sets
//! them with `tocsin chains set TEMPLATE --chain '{…}' --reason …` (audited); intake reads them
//! at most once a minute and lays the template's chain out for each alert's recipient. A
//! request's own `chain` always wins, and an alert keeps the chain it was accepted with: a
//! policy changed later changes only later alerts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::chain::{ChainError, ChainShape, ChainSpec, PolicyRef, parse_chain_shape};
use super::phone::PhoneNumber;
use super::template::{Catalog, TemplateRef};

/// One template's chain, as set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainPolicy {
    /// The template's name: every version of it.
    pub template: String,
    pub shape: ChainShape,
    pub set_at: DateTime<Utc>,
}

/// Why a chain cannot be a template's policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("no template is named '{0}' (tocsin templates lists them)")]
    UnknownTemplate(String),
    #[error("'{0}' is tocsin's own template (probe, canary): it is no page and has no chain")]
    OwnTemplate(String),
    #[error("the chain is not valid: {}", .0.iter().map(|e| e.message.as_str()).collect::<Vec<_>>().join("; "))]
    Chain(Vec<ChainError>),
}

/// The prefix of tocsin's own templates (`tocsin_probe`, `tocsin_canary`): never chained.
const OWN_TEMPLATES: &str = "tocsin_";

impl ChainPolicy {
    /// Reads a policy for `template`: the template exists in `catalog` (some version), is not
    /// tocsin's own, and `spec` is a chain as a request would give it (without the recipient,
    /// whose level is each alert's own).
    pub fn parse(
        template: &str,
        spec: &Value,
        set_at: DateTime<Utc>,
        catalog: &Catalog,
    ) -> Result<ChainPolicy, PolicyError> {
        if template.starts_with(OWN_TEMPLATES) {
            return Err(PolicyError::OwnTemplate(template.to_owned()));
        }
        if !catalog.has_name(template) {
            return Err(PolicyError::UnknownTemplate(template.to_owned()));
        }
        let shape = parse_chain_shape(spec).map_err(PolicyError::Chain)?;
        Ok(ChainPolicy { template: template.to_owned(), shape, set_at })
    }

    pub fn reference(&self) -> PolicyRef {
        PolicyRef { template: self.template.clone(), set_at: self.set_at }
    }
}

/// Every template's chain policy, as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainPolicies {
    by_template: BTreeMap<String, ChainPolicy>,
}

impl ChainPolicies {
    pub fn new(policies: impl IntoIterator<Item = ChainPolicy>) -> Self {
        ChainPolicies { by_template: policies.into_iter().map(|p| (p.template.clone(), p)).collect() }
    }

    pub fn get(&self, template: &str) -> Option<&ChainPolicy> {
        self.by_template.get(template)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ChainPolicy> {
        self.by_template.values()
    }

    /// The chain an alert of `template` to `recipient` gets when its request names none: its
    /// template's policy laid out for the recipient, or `None` (the default chain).
    pub fn chain_for(&self, template: &TemplateRef, recipient: &PhoneNumber) -> Option<ChainSpec> {
        let policy = self.get(&template.name)?;
        Some(policy.shape.for_recipient(recipient, Some(policy.reference())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-06T05:00:00Z").expect("time").with_timezone(&Utc)
    }

    #[test]
    fn a_templates_policy_is_laid_out_for_each_alerts_own_recipient() {
        let spec = json!({"wait": "5m", "then": [{"to": "+14155550101", "wait": "10m"}]});
        let policy = ChainPolicy::parse("disk_full", &spec, at(), Catalog::builtin()).expect("valid");
        let policies = ChainPolicies::new([policy]);
        let template = TemplateRef { name: "disk_full".into(), version: 1 };
        for recipient in ["+14155550100", "+14155550199"] {
            let to = PhoneNumber::parse(recipient).expect("number");
            let chain = policies.chain_for(&template, &to).expect("a chain");
            let levels: Vec<(&str, u64)> = chain.levels.iter().map(|l| (l.to.expose(), l.wait_s)).collect();
            assert_eq!(levels, vec![(recipient, 300), ("+14155550101", 600)]);
            assert_eq!(chain.policy, Some(PolicyRef { template: "disk_full".into(), set_at: at() }));
        }
        let other = TemplateRef { name: "service_down".into(), version: 2 };
        assert_eq!(policies.chain_for(&other, &PhoneNumber::parse("+14155550100").expect("n")), None);
    }

    #[test]
    fn a_policy_names_a_template_that_exists_and_is_no_probe_and_a_valid_chain() {
        let spec = json!({"wait": "5m"});
        let catalog = Catalog::builtin();
        assert_eq!(
            ChainPolicy::parse("disk_ful", &spec, at(), catalog),
            Err(PolicyError::UnknownTemplate("disk_ful".into()))
        );
        assert_eq!(
            ChainPolicy::parse("tocsin_canary", &spec, at(), catalog),
            Err(PolicyError::OwnTemplate("tocsin_canary".into()))
        );
        let Err(PolicyError::Chain(errors)) =
            ChainPolicy::parse("disk_full", &json!({"wait": "5s", "then": [{"to": "+1"}]}), at(), catalog)
        else {
            panic!("an invalid chain is refused");
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["chain.wait", "chain.then[0].to", "chain.then[0].wait"]);
    }
}
