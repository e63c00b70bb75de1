//! IAM enforced in the emulator tests. moto answers every call whatever the caller's role says;
//! AWS does not. So every process that plays a function (and the operator CLI) signs its requests
//! with its own access key id, and a gate in front of moto ([`gate::Gate`], the endpoint every
//! client reaches) attributes each request to its principal, derives what AWS authorizes for it
//! ([`request`]), and evaluates that against the principal's policies from the SAM-translated
//! template ([`roles`], [`template`], [`policy`]). A call the role does not allow is answered as
//! AWS answers it (AccessDenied in the service's protocol) and recorded: the test that made it
//! fails, naming the function, the action, the resource and the statement that is missing. What
//! every test exercised is written to `target/tocsin-iam/` ([`coverage`]) so that grants no test
//! exercises are reported too.
//!
//! The harness itself (provisioning, the test's own reads, and AWS acting where the harness plays
//! it: SNS writing delivery-status logs, on-call reading the escalation queue) signs as
//! [`Principal::Harness`] and is not checked.

pub mod coverage;
pub mod gate;
pub mod implicit;
pub mod policy;
pub mod request;
pub mod roles;
pub mod template;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use gate::{Denial, Gate};
pub use roles::Principals;

/// The stack name every local emulator run uses.
pub const LOCAL_STACK: &str = "tocsin-local";

/// Who signs a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Principal {
    /// The test and the AWS services the harness plays: not checked.
    Harness,
    /// A function of the stack (its logical id), with its execution role.
    Function(String),
    /// Lambda's event source mapping of a function, which polls with the function's role.
    EventSourceMapping(String),
    /// An operator running the `tocsin` CLI with both documented operator policies, signed in
    /// with MFA: what break-glass actions (resend, re-enable, acknowledge, send) need.
    Operator,
    /// An operator with the read-only policy alone (show, list, doctor, carriers).
    ReadOnlyOperator,
    /// An operator with both policies in a session without MFA: the break-glass grants do not
    /// apply.
    OperatorWithoutMfa,
}

/// The one secret every principal uses (moto checks no signature; the API stand-in does).
pub const SECRET: &str = "test";

impl Principal {
    pub fn function(logical_id: &str) -> Principal {
        Principal::Function(logical_id.to_owned())
    }

    /// The access key id this principal signs with: recognisable in every request.
    pub fn access_key_id(&self) -> String {
        match self {
            Principal::Harness => "HARNESS".into(),
            Principal::Function(f) => format!("FUNCTION-{f}"),
            Principal::EventSourceMapping(f) => format!("ESM-{f}"),
            Principal::Operator => "OPERATOR".into(),
            Principal::ReadOnlyOperator => "OPERATOR-READ-ONLY".into(),
            Principal::OperatorWithoutMfa => "OPERATOR-WITHOUT-MFA".into(),
        }
    }

    /// The ARN AWS reports for this principal's requests (what API Gateway's IAM authorizer
    /// passes on as the caller): a session of its role, or the local producer for the harness.
    pub fn caller_arn(&self) -> String {
        let session =
            |role: &str, name: &str| format!("arn:aws:sts::{}:assumed-role/{role}/{name}", crate::stack::ACCOUNT);
        match self {
            Principal::Harness => crate::stack::LOCAL_PRODUCER.into(),
            Principal::Function(f) | Principal::EventSourceMapping(f) => session(&format!("{f}Role"), f),
            Principal::Operator => session("tocsin-operator", "operator"),
            Principal::ReadOnlyOperator => session("tocsin-operator-read-only", "operator"),
            Principal::OperatorWithoutMfa => session("tocsin-operator", "operator-without-mfa"),
        }
    }

    pub fn from_access_key_id(key: &str) -> Option<Principal> {
        match key {
            "HARNESS" => Some(Principal::Harness),
            "OPERATOR" => Some(Principal::Operator),
            "OPERATOR-READ-ONLY" => Some(Principal::ReadOnlyOperator),
            "OPERATOR-WITHOUT-MFA" => Some(Principal::OperatorWithoutMfa),
            k => k
                .strip_prefix("FUNCTION-")
                .map(|f| Principal::Function(f.to_owned()))
                .or_else(|| k.strip_prefix("ESM-").map(|f| Principal::EventSourceMapping(f.to_owned()))),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Harness => f.write_str("the harness"),
            Principal::Function(id) => f.write_str(id),
            Principal::EventSourceMapping(id) => write!(f, "{id}'s event source mapping"),
            Principal::Operator => f.write_str("the operator (tocsin CLI)"),
            Principal::ReadOnlyOperator => f.write_str("a read-only operator (tocsin CLI)"),
            Principal::OperatorWithoutMfa => f.write_str("an operator without MFA (tocsin CLI)"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IamError {
    #[error("IAM gate: {0}")]
    Roles(#[from] roles::RoleError),
    #[error("IAM gate: {0}")]
    Harness(String),
}

/// Every principal's policies for stack `stack` with the parameters' defaults: `template.yaml`
/// translated by the SAM translator, resolved for that stack; loaded once per process.
/// Blocking (the translator runs in Python).
pub fn principals_for(stack: &str) -> Result<Arc<Principals>, IamError> {
    principals_with(stack, &[])
}

/// [`principals_for`] with these template parameters instead of their defaults (a stack deployed
/// with `--parameter-overrides`: its roles' conditional statements follow them).
pub fn principals_with(stack: &str, parameters: &[(&str, &str)]) -> Result<Arc<Principals>, IamError> {
    static CACHE: OnceLock<Mutex<BTreeMap<String, Arc<Principals>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let cache_key = format!("{stack}{parameters:?}");
    if let Some(p) = cache.lock().map_err(|_| IamError::Harness("cache lock".into()))?.get(&cache_key) {
        return Ok(p.clone());
    }
    let translated = crate::sam::translate_template_yaml(&[])
        .map_err(|e| IamError::Harness(format!("translating template.yaml: {e}")))?;
    let resolved = template::Resolved::new(translated, stack, parameters);
    let read = |file: &str| -> Result<serde_json::Value, IamError> {
        let path = crate::workspace_root().join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| IamError::Harness(format!("{}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| IamError::Harness(format!("{}: {e}", path.display())))
    };
    let read_only = read(roles::OPERATOR_READ_ONLY_POLICY_FILE)?;
    let break_glass = read(roles::OPERATOR_BREAK_GLASS_POLICY_FILE)?;
    let p = Arc::new(roles::load(resolved, &read_only, &break_glass)?);
    cache.lock().map_err(|_| IamError::Harness("cache lock".into()))?.insert(cache_key, p.clone());
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_principal_round_trips_through_its_access_key_id() {
        for p in [
            Principal::Harness,
            Principal::Operator,
            Principal::ReadOnlyOperator,
            Principal::OperatorWithoutMfa,
            Principal::function("SenderFunction"),
            Principal::EventSourceMapping("SenderFunction".into()),
        ] {
            assert_eq!(Principal::from_access_key_id(&p.access_key_id()), Some(p));
        }
        assert_eq!(Principal::from_access_key_id("test"), None, "the old shared key belongs to no one");
    }
}
