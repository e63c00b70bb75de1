//! Who may do what: each function's execution role as the SAM translator generates it (inline
//! policies, plus the AWS managed policies SAM attaches), the operator's policy the CLI documents
//! (the operator policies (`shared/cli/operator-read-only-policy.json`, `operator-break-glass-policy.json`)), all resolved for the local stack; and the facts the
//! request mapping needs (which queues a customer managed key encrypts).

use std::collections::BTreeMap;

use serde_json::Value;

use super::Principal;
use super::policy::{Context, Policy, PolicyError};
use super::request::Facts;
use super::template::{Resolved, TemplateError};
use crate::stack::{ACCOUNT, REGION};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Unsupported(String),
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

/// The AWS managed policies SAM attaches to function roles, as AWS publishes them. A role naming
/// any other managed policy is refused (its statements would be unknown).
const MANAGED_POLICIES: &[(&str, &str)] = &[
    (
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["logs:CreateLogGroup","logs:CreateLogStream","logs:PutLogEvents"],"Resource":"*"}]}"#,
    ),
    (
        "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["sqs:ReceiveMessage","sqs:DeleteMessage","sqs:GetQueueAttributes","logs:CreateLogGroup","logs:CreateLogStream","logs:PutLogEvents"],"Resource":"*"}]}"#,
    ),
];

/// The policies a principal's requests are evaluated against, and where they come from.
#[derive(Debug, Clone)]
pub struct Role {
    /// The role's logical id (`SenderFunctionRole`), or `OperatorPolicy`.
    pub id: String,
    /// `arn:aws:iam::…:role/…`, or the operator's placeholder.
    pub arn: String,
    /// The caller as AWS names it in an AccessDenied message.
    pub caller: String,
    pub policies: Vec<Policy>,
    /// Where a missing statement goes.
    pub fix_in: String,
    /// Condition keys of the caller's session, in every request's context
    /// (`aws:MultiFactorAuthPresent` for an operator who signed in with MFA).
    pub session: Context,
}

/// Every principal's policies for one stack, and the facts about its resources.
#[derive(Debug, Clone)]
pub struct Principals {
    pub stack: String,
    pub roles: BTreeMap<String, Role>,
    pub facts: Facts,
    /// Function logical id → its role's logical id.
    pub function_roles: BTreeMap<String, String>,
    /// The translated template they come from, resolved for the stack.
    pub template: Resolved,
}

impl Role {
    /// A request's condition keys with the caller's session's added.
    pub fn in_session(&self, request: &Context) -> Context {
        let mut context = request.clone();
        for (k, v) in &self.session {
            context.entry(k.clone()).or_insert_with(|| v.clone());
        }
        context
    }
}

impl Principals {
    /// The policies `principal`'s requests are evaluated against (`None`: the harness, unchecked).
    pub fn role_of(&self, principal: &Principal) -> Option<&Role> {
        match principal {
            Principal::Harness => None,
            Principal::Function(f) | Principal::EventSourceMapping(f) => {
                self.function_roles.get(f).and_then(|r| self.roles.get(r))
            }
            Principal::Operator => self.roles.get(OPERATOR),
            Principal::ReadOnlyOperator => self.roles.get(READ_ONLY_OPERATOR),
            Principal::OperatorWithoutMfa => self.roles.get(OPERATOR_WITHOUT_MFA),
        }
    }
}

/// The operator's policies' ids among the roles: both policies with MFA (break-glass), the
/// read-only policy alone, and both policies in a session without MFA.
pub const OPERATOR: &str = "OperatorPolicy";
pub const READ_ONLY_OPERATOR: &str = "OperatorReadOnlyPolicy";
pub const OPERATOR_WITHOUT_MFA: &str = "OperatorPolicyWithoutMfa";

/// The operator policy files, relative to the workspace root: what every operator may read, and
/// the break-glass actions (each allowed only in a session with MFA).
pub const OPERATOR_READ_ONLY_POLICY_FILE: &str = "shared/cli/operator-read-only-policy.json";
pub const OPERATOR_BREAK_GLASS_POLICY_FILE: &str = "shared/cli/operator-break-glass-policy.json";

/// Reads every function role (and the operator policy) of `t`.
pub fn load(t: Resolved, read_only: &Value, break_glass: &Value) -> Result<Principals, RoleError> {
    let mut roles = BTreeMap::new();
    let mut function_roles = BTreeMap::new();
    for (function, f) in t.resources_of("AWS::Lambda::Function")? {
        let role_id = f["Properties"]["Role"]["Fn::GetAtt"][0].as_str().ok_or_else(|| {
            RoleError::Unsupported(format!("{function}: Role is not Fn::GetAtt of a role in the template"))
        })?;
        let session = t.physical_name(&function)?;
        let role_name = t.physical_name(role_id)?;
        let role = Role {
            id: role_id.to_owned(),
            arn: format!("arn:aws:iam::{ACCOUNT}:role/{role_name}"),
            caller: format!("arn:aws:sts::{ACCOUNT}:assumed-role/{role_name}/{session}"),
            policies: role_policies(&t, role_id)?,
            fix_in: format!("template.yaml, {function} → Properties → Policies"),
            session: Context::new(),
        };
        function_roles.insert(function.clone(), role_id.to_owned());
        roles.insert(role_id.to_owned(), role);
    }
    let read_only = Policy::parse(
        OPERATOR_READ_ONLY_POLICY_FILE,
        &t.resolve(&sub_every_string(read_only))?.unwrap_or(Value::Null),
    )?;
    let break_glass = Policy::parse(
        OPERATOR_BREAK_GLASS_POLICY_FILE,
        &t.resolve(&sub_every_string(break_glass))?.unwrap_or(Value::Null),
    )?;
    let mfa = Context::from([("aws:MultiFactorAuthPresent".to_owned(), vec!["true".to_owned()])]);
    for (id, user, policies, session) in [
        (OPERATOR, "alice", vec![read_only.clone(), break_glass.clone()], mfa),
        (READ_ONLY_OPERATOR, "bob", vec![read_only.clone()], Context::new()),
        (OPERATOR_WITHOUT_MFA, "carol", vec![read_only, break_glass], Context::new()),
    ] {
        roles.insert(
            id.to_owned(),
            Role {
                id: id.to_owned(),
                arn: format!(
                    "{OPERATOR_READ_ONLY_POLICY_FILE} and {OPERATOR_BREAK_GLASS_POLICY_FILE} (for stack {})",
                    t.stack
                ),
                caller: format!("arn:aws:sts::{ACCOUNT}:assumed-role/tocsin-operator/{user}"),
                policies,
                fix_in: format!("{OPERATOR_READ_ONLY_POLICY_FILE} or {OPERATOR_BREAK_GLASS_POLICY_FILE}"),
                session,
            },
        );
    }
    let facts = facts(&t)?;
    Ok(Principals { stack: t.stack.clone(), roles, facts, function_roles, template: t })
}

/// Every string of a document as an `Fn::Sub` (the operator policy names the stack's resources
/// with `${AWS::StackName}`, `${AWS::Region}`, … as a CloudFormation `Fn::Sub` would).
fn sub_every_string(v: &Value) -> Value {
    match v {
        Value::String(s) if s.contains("${") => serde_json::json!({ "Fn::Sub": s }),
        Value::Array(a) => Value::Array(a.iter().map(sub_every_string).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), sub_every_string(x))).collect()),
        other => other.clone(),
    }
}

fn role_policies(t: &Resolved, role_id: &str) -> Result<Vec<Policy>, RoleError> {
    let role = &t.template()["Resources"][role_id];
    if role["Type"] != "AWS::IAM::Role" {
        return Err(RoleError::Unsupported(format!("{role_id} is not an AWS::IAM::Role of the template")));
    }
    let p = t.resolve(&role["Properties"])?.unwrap_or(Value::Null);
    let mut out = Vec::new();
    for inline in p["Policies"].as_array().into_iter().flatten() {
        let name = inline["PolicyName"].as_str().unwrap_or("inline");
        out.push(Policy::parse(&format!("{role_id}/{name}"), &inline["PolicyDocument"])?);
    }
    for arn in p["ManagedPolicyArns"].as_array().into_iter().flatten() {
        let arn = arn.as_str().unwrap_or_default();
        let (_, doc) = MANAGED_POLICIES.iter().find(|(a, _)| *a == arn).ok_or_else(|| {
            RoleError::Unsupported(format!("{role_id}: managed policy {arn} is not known to the IAM gate"))
        })?;
        let doc: Value = serde_json::from_str(doc).map_err(|e| RoleError::Unsupported(e.to_string()))?;
        let name = arn.rsplit('/').next().unwrap_or(arn);
        out.push(Policy::parse(&format!("{role_id}/{name} (AWS managed)"), &doc)?);
    }
    if p.get("PermissionsBoundary").is_some() {
        return Err(RoleError::Unsupported(format!("{role_id}: permissions boundaries are not evaluated by the gate")));
    }
    // Policies attached from outside the role.
    for ty in ["AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"] {
        for (id, r) in t.resources_of(ty)? {
            let attached =
                r["Properties"]["Roles"].as_array().into_iter().flatten().any(|x| x["Ref"].as_str() == Some(role_id));
            if attached {
                let doc = t.resolve(&r["Properties"]["PolicyDocument"])?.unwrap_or(Value::Null);
                out.push(Policy::parse(&id, &doc)?);
            }
        }
    }
    Ok(out)
}

fn facts(t: &Resolved) -> Result<Facts, RoleError> {
    let mut queue_keys = BTreeMap::new();
    for (id, q) in t.resources_of("AWS::SQS::Queue")? {
        let Some(k) = q["Properties"].get("KmsMasterKeyId") else { continue };
        if let Some(key) = t.kms_key(&t.string(k)?)? {
            queue_keys.insert(format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{}", t.physical_name(&id)?), key);
        }
    }
    let mut table_keys = BTreeMap::new();
    for (id, table) in t.resources_of("AWS::DynamoDB::Table")? {
        let sse = t.resolve(&table["Properties"]["SSESpecification"])?.unwrap_or(Value::Null);
        let kms = sse["SSEEnabled"] == true && sse["SSEType"] == "KMS";
        if let (true, Some(k)) = (kms, sse["KMSMasterKeyId"].as_str())
            && let Some(key) = t.kms_key(k)?
        {
            table_keys.insert(format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}", t.physical_name(&id)?), key);
        }
    }
    Ok(Facts {
        region: REGION.into(),
        account: ACCOUNT.into(),
        queue_keys,
        table_keys,
        sms_identities: BTreeMap::new(),
    })
}
