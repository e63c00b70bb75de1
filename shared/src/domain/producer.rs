//! Producers: who may submit alerts, and how intake knows which one a request came from.
//!
//! A deployment names its producers by IAM principal (template parameter `Producers`: role or
//! user ARNs). A producer's name is its principal's name (the last segment of the ARN), so the
//! same producer is recognised on both doors:
//!
//! - **HTTP API**: API Gateway's IAM authorizer has checked the SigV4 signature and hands intake
//!   the caller's ARN (`arn:aws:iam::A:user/N`, or `arn:aws:sts::A:assumed-role/R/session` for a
//!   role). It names a producer when account, kind and name match one.
//! - **Event bus**: an event carries the `source` and the `account` of whoever put it. The bus
//!   policy lets only the listed principals put events, and only with `source` equal to their
//!   `tocsin-producer` tag (docs/security.md). It names a producer when `source` is a producer's
//!   name and `account` is that producer's account.
//!
//! The canary's scheduled event (source [`CANARY_SOURCE`]) is the stack's own producer, limited
//! to the canary template. Nothing else is a producer: an unknown caller is refused before any
//! write. The producer is recorded on the intent and is part of its idempotency key, so two
//! producers' equal event ids never collide.

use std::fmt;

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, Utc};
use serde::{Deserialize, Serialize};

/// The source of the canary's scheduled event (template.yaml, `CanaryRun`).
pub const CANARY_SOURCE: &str = "tocsin.canary";
/// The only template the canary producer may use.
pub const CANARY_TEMPLATE: &str = "tocsin_canary";
/// The principal tag that names a producer on the event bus (the bus policy compares it with an
/// event's `source`).
pub const PRODUCER_TAG: &str = "tocsin-producer";

/// A producer's name: an IAM principal's name (1–64 of `A-Za-z0-9+=,.@_-`), usable as an
/// EventBridge `source` (not `aws.`-prefixed).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProducerName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    #[error("'{0}' is not a producer name: 1–64 characters of A-Z a-z 0-9 + = , . @ _ -, not starting with 'aws.'")]
    Name(String),
    #[error("'{0}' is not an IAM role or user ARN (arn:aws:iam::123456789012:role/NAME or …:user/NAME)")]
    Arn(String),
    #[error("two producers are named '{0}': a producer's name is its role or user name, and must be unique")]
    Duplicate(String),
    #[error("'{0}' is the canary's own producer name; a principal cannot take it")]
    Reserved(String),
}

impl ProducerName {
    pub fn parse(raw: &str) -> Result<Self, ProducerError> {
        let ok = (1..=64).contains(&raw.len())
            && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
            && !raw.to_ascii_lowercase().starts_with("aws.");
        if ok { Ok(ProducerName(raw.to_owned())) } else { Err(ProducerError::Name(raw.to_owned())) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canary's producer.
    pub fn canary() -> Self {
        ProducerName(CANARY_SOURCE.to_owned())
    }

    pub fn is_canary(&self) -> bool {
        self.0 == CANARY_SOURCE
    }
}

impl fmt::Display for ProducerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ProducerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProducerName({})", self.0)
    }
}

impl TryFrom<String> for ProducerName {
    type Error = ProducerError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<ProducerName> for String {
    fn from(value: ProducerName) -> Self {
        value.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalKind {
    Role,
    User,
}

/// One producer: a named IAM principal of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub name: ProducerName,
    pub account: String,
    pub kind: PrincipalKind,
    /// The ARN as configured (with its path, if any).
    pub arn: String,
}

impl Producer {
    /// Reads `arn:<partition>:iam::<account>:role/<path/>NAME` or `…:user/<path/>NAME`.
    pub fn from_arn(arn: &str) -> Result<Self, ProducerError> {
        let bad = || ProducerError::Arn(arn.to_owned());
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let ["arn", partition, "iam", "", account, resource] = parts[..] else { return Err(bad()) };
        if partition.is_empty() || !is_account(account) {
            return Err(bad());
        }
        let (kind, path) = match resource.split_once('/') {
            Some(("role", rest)) => (PrincipalKind::Role, rest),
            Some(("user", rest)) => (PrincipalKind::User, rest),
            _ => return Err(bad()),
        };
        let name = path.rsplit('/').next().filter(|n| !n.is_empty()).ok_or_else(bad)?;
        let name = ProducerName::parse(name).map_err(|_| bad())?;
        if name.is_canary() {
            return Err(ProducerError::Reserved(name.0));
        }
        Ok(Producer { name, account: account.to_owned(), kind, arn: arn.to_owned() })
    }
}

fn is_account(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Who a request says it came from, as its door tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The HTTP API's IAM authorizer: the signing principal's ARN (`None` when the request
    /// carries none, e.g. an API without IAM authorization in front).
    Signed { arn: Option<&'a str> },
    /// An event: its `source` and `account`.
    Event { source: &'a str, account: &'a str },
}

/// Why a request names no producer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownProducer {
    #[error("the request carries no signed caller; send it through the stack's IAM-authorised API")]
    Unsigned,
    #[error("the caller {0} is not one of the stack's producers (template parameter Producers)")]
    NotAProducer(String),
    #[error(
        "source '{event_source}' from account {account} is not one of the stack's producers (template parameter Producers)"
    )]
    NotAProducerEvent { event_source: String, account: String },
}

/// The deployment's producers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Producers(Vec<Producer>);

impl Producers {
    /// Reads a comma-separated list of role or user ARNs (empty: no producer at all).
    pub fn parse(list: &str) -> Result<Self, Vec<ProducerError>> {
        let mut producers: Vec<Producer> = Vec::new();
        let mut errors = Vec::new();
        for arn in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match Producer::from_arn(arn) {
                Ok(p) if producers.iter().any(|q| q.name == p.name) => {
                    errors.push(ProducerError::Duplicate(p.name.0));
                }
                Ok(p) => producers.push(p),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Ok(Producers(producers)) } else { Err(errors) }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Producer> {
        self.0.iter()
    }

    /// The producer `caller` is, if any. The canary's event source names the canary producer.
    pub fn identify(&self, caller: Caller<'_>) -> Result<ProducerName, UnknownProducer> {
        match caller {
            Caller::Signed { arn: None } => Err(UnknownProducer::Unsigned),
            Caller::Signed { arn: Some(arn) } => signed_principal(arn)
                .and_then(|(account, kind, name)| {
                    self.0.iter().find(|p| p.account == account && p.kind == kind && p.name.as_str() == name)
                })
                .map(|p| p.name.clone())
                .ok_or_else(|| UnknownProducer::NotAProducer(arn.to_owned())),
            Caller::Event { source, .. } if source == CANARY_SOURCE => Ok(ProducerName::canary()),
            Caller::Event { source, account } => self
                .0
                .iter()
                .find(|p| p.name.as_str() == source && p.account == account)
                .map(|p| p.name.clone())
                .ok_or_else(|| UnknownProducer::NotAProducerEvent {
                    event_source: source.to_owned(),
                    account: account.to_owned(),
                }),
        }
    }
}

/// The account, kind and name of a signing principal's ARN: an IAM user, or a role's session
/// (`arn:aws:sts::A:assumed-role/ROLE/SESSION`; a session's ARN carries no role path).
fn signed_principal(arn: &str) -> Option<(&str, PrincipalKind, &str)> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ["arn", _, service, "", account, resource] = parts[..] else { return None };
    if !is_account(account) {
        return None;
    }
    match (service, resource.split_once('/')?) {
        ("iam", ("user", path)) => Some((account, PrincipalKind::User, path.rsplit('/').next()?)),
        ("sts", ("assumed-role", rest)) => {
            let (role, session) = rest.split_once('/')?;
            (!role.is_empty() && !session.is_empty()).then_some((account, PrincipalKind::Role, role))
        }
        _ => None,
    }
}

/// How many requests one producer may submit per minute (template parameters
/// `ProducerRatePerMinute`, and `ProducerRates` for producers with a rate of their own): a fixed
/// window per producer and UTC minute, counted in the ledger, so one producer's flood is shed
/// without touching any other producer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRate {
    /// Every producer's rate, unless it has its own.
    pub per_minute: u32,
    /// Producers with a rate of their own (`name=rate,…`): a monitoring system that pages for a
    /// whole fleet at once, or a producer that sends a few alerts a day and should be held to them.
    pub overrides: BTreeMap<ProducerName, u32>,
}

impl ProducerRate {
    /// `producer`'s requests per minute.
    pub fn limit_for(&self, producer: &ProducerName) -> u32 {
        self.overrides.get(producer).copied().unwrap_or(self.per_minute)
    }

    /// Reads `name=rate,name=rate` (empty: none). Each name at most once, each rate at least 1,
    /// and each name one of `producers` (or the canary's): a rate for a name nobody submits
    /// under is a typo that would leave the real producer at the default.
    pub fn parse_overrides(raw: &str, producers: &Producers) -> Result<BTreeMap<ProducerName, u32>, String> {
        let mut out = BTreeMap::new();
        for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, rate) = item.split_once('=').ok_or_else(|| format!("{item:?} is not name=rate"))?;
            let name = ProducerName::parse(name.trim()).map_err(|e| format!("{item:?}: {e}"))?;
            let rate: u32 = rate
                .trim()
                .parse()
                .ok()
                .filter(|r| *r >= 1)
                .ok_or_else(|| format!("{item:?}: the rate must be a whole number of at least 1"))?;
            if !name.is_canary() && !producers.iter().any(|p| p.name == name) {
                return Err(format!("{item:?}: {name} is not one of the producers (Producers)"));
            }
            if out.insert(name.clone(), rate).is_some() {
                return Err(format!("{name} has two rates"));
            }
        }
        Ok(out)
    }
}

/// The window a request is counted in, and when the next one opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateWindow {
    pub start: DateTime<Utc>,
    pub next: DateTime<Utc>,
}

impl ProducerRate {
    /// The minute `now` falls in.
    pub fn window(now: DateTime<Utc>) -> RateWindow {
        let start = now.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(now);
        RateWindow { start, next: start + chrono::Duration::minutes(1) }
    }
}

impl RateWindow {
    /// Whole seconds from `now` until the next window (at least 1): a refused caller's
    /// `Retry-After`.
    pub fn retry_after(&self, now: DateTime<Utc>) -> u32 {
        let ms = (self.next - now).num_milliseconds().max(0);
        u32::try_from((ms + 999) / 1000).unwrap_or(60).max(1)
    }

    /// How long the counter is kept: past its minute, with room for clock skew.
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.next + chrono::Duration::hours(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BILLING: &str = "arn:aws:iam::123456789012:role/services/billing";
    const MONITORING: &str = "arn:aws:iam::123456789012:user/monitoring";

    fn producers() -> Producers {
        Producers::parse(&format!("{BILLING}, {MONITORING}")).expect("valid")
    }

    #[test]
    fn a_producer_may_have_a_rate_of_its_own_and_a_rate_for_nobody_is_refused() {
        let overrides = ProducerRate::parse_overrides("billing=600, tocsin.canary=2", &producers()).expect("valid");
        let rate = ProducerRate { per_minute: 120, overrides };
        assert_eq!(rate.limit_for(&name("billing")), 600);
        assert_eq!(rate.limit_for(&name("monitoring")), 120, "the others keep the default");
        assert_eq!(rate.limit_for(&ProducerName::canary()), 2);
        assert!(ProducerRate::parse_overrides("", &producers()).expect("none").is_empty());
        for bad in ["billing", "billing=0", "billing=x", "biling=5", "billing=5,billing=6"] {
            assert!(ProducerRate::parse_overrides(bad, &producers()).is_err(), "{bad}");
        }
    }

    fn name(n: &str) -> ProducerName {
        ProducerName::parse(n).expect("name")
    }

    #[test]
    fn a_role_session_is_its_role_and_a_user_is_itself() {
        let p = producers();
        let session = "arn:aws:sts::123456789012:assumed-role/billing/i-0abc";
        assert_eq!(p.identify(Caller::Signed { arn: Some(session) }), Ok(name("billing")));
        assert_eq!(p.identify(Caller::Signed { arn: Some(MONITORING) }), Ok(name("monitoring")));
    }

    #[test]
    fn the_same_name_in_another_account_or_of_another_kind_is_a_stranger() {
        let p = producers();
        for arn in [
            "arn:aws:sts::210987654321:assumed-role/billing/s",
            "arn:aws:iam::123456789012:user/billing",
            "arn:aws:sts::123456789012:assumed-role/monitoring/s",
            "arn:aws:iam::123456789012:root",
            "arn:aws:sts::123456789012:federated-user/billing",
            "theUserArn",
        ] {
            assert!(
                matches!(p.identify(Caller::Signed { arn: Some(arn) }), Err(UnknownProducer::NotAProducer(_))),
                "{arn}"
            );
        }
        assert_eq!(p.identify(Caller::Signed { arn: None }), Err(UnknownProducer::Unsigned));
    }

    #[test]
    fn an_event_names_a_producer_by_its_source_from_that_producers_account() {
        let p = producers();
        assert_eq!(p.identify(Caller::Event { source: "billing", account: "123456789012" }), Ok(name("billing")));
        assert!(p.identify(Caller::Event { source: "billing", account: "210987654321" }).is_err());
        assert!(p.identify(Caller::Event { source: "com.example.monitoring", account: "123456789012" }).is_err());
        assert_eq!(
            p.identify(Caller::Event { source: CANARY_SOURCE, account: "123456789012" }),
            Ok(ProducerName::canary())
        );
    }

    #[test]
    fn no_producers_accept_nobody() {
        let none = Producers::parse("").expect("empty is valid");
        assert!(none.is_empty());
        assert!(none.identify(Caller::Signed { arn: Some(MONITORING) }).is_err());
    }

    #[test]
    fn configuration_errors_are_named() {
        let errs = Producers::parse("arn:aws:iam::123456789012:group/ops, arn:aws:iam::123:role/x")
            .expect_err("a group and a short account");
        assert_eq!(errs.len(), 2);
        let dup = Producers::parse(&format!("{BILLING},arn:aws:iam::210987654321:role/billing"))
            .expect_err("a duplicate name");
        assert_eq!(dup, vec![ProducerError::Duplicate("billing".into())]);
        let canary = Producers::parse("arn:aws:iam::123456789012:role/tocsin.canary").expect_err("the canary's name");
        assert_eq!(canary, vec![ProducerError::Reserved("tocsin.canary".into())]);
    }

    #[test]
    fn a_producers_window_is_its_utc_minute_and_a_refused_caller_waits_for_the_next() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc);
        let w = ProducerRate::window(at("2026-12-03T10:41:59.200Z"));
        assert_eq!((w.start, w.next), (at("2026-12-03T10:41:00Z"), at("2026-12-03T10:42:00Z")));
        assert_eq!(w.retry_after(at("2026-12-03T10:41:59.200Z")), 1);
        assert_eq!(w.retry_after(at("2026-12-03T10:41:00Z")), 60);
        assert_eq!(ProducerRate::window(at("2026-12-03T10:42:00Z")).start, at("2026-12-03T10:42:00Z"));
    }

    #[test]
    fn producer_names_are_iam_names_and_never_aws_sources() {
        assert!(ProducerName::parse("billing-svc.prod@eu").is_ok());
        for bad in ["", "aws.events", "AWS.x", "with space", "slash/no", &"x".repeat(65)] {
            assert!(ProducerName::parse(bad).is_err(), "{bad}");
        }
    }
}
