//! What AWS does with a function's role that no request in a test shows, read from the translated
//! template:
//! - an SQS event source mapping polls with the function's role: `sqs:ReceiveMessage`,
//!   `sqs:DeleteMessage`, `sqs:GetQueueAttributes` on its queue, and `kms:Decrypt` on the queue's
//!   customer managed key (the harness plays the mapping with the function's role too, so the
//!   receive and delete are also checked per request — this adds `GetQueueAttributes`);
//! - an asynchronous invocation's on-failure (or on-success) SQS destination is sent to with the
//!   function's role: `sqs:SendMessage`, plus `kms:GenerateDataKey` and `kms:Decrypt` on the
//!   queue's customer managed key;
//! - Lambda decrypts environment variables encrypted with a customer managed key (`KmsKeyArn`)
//!   with the function's role: `kms:Decrypt` (without it, init fails with
//!   `KMSAccessDeniedException`);
//! - Lambda writes the function's logs to its log group with the function's role:
//!   `logs:CreateLogStream` and `logs:PutLogEvents` on the group's streams.

use serde_json::Value;

use super::Principal;
use super::policy::Context;
use super::request::Requirement;
use super::roles::{Principals, RoleError};
use crate::stack::{ACCOUNT, REGION};

/// One requirement a function's role must meet without a request showing it.
#[derive(Debug, Clone)]
pub struct Implicit {
    pub principal: Principal,
    pub requirement: Requirement,
}

fn kms(action: &str, key: &super::request::Key, queue: Option<&str>, why: String) -> Requirement {
    let mut context = Context::new();
    let via = if queue.is_some() { "sqs" } else { "lambda" };
    context.insert("kms:ViaService".into(), vec![format!("{via}.{REGION}.amazonaws.com")]);
    context.insert("kms:CallerAccount".into(), vec![ACCOUNT.into()]);
    context.insert("kms:ResourceAliases".into(), key.aliases.clone());
    if let Some(q) = queue {
        context.insert("kms:EncryptionContext:aws:sqs:arn".into(), vec![q.to_owned()]);
    }
    Requirement { action: action.into(), resource: key.arn.clone(), context, because: Some(why) }
}

fn plain(action: &str, resource: &str, why: String) -> Requirement {
    Requirement { action: action.into(), resource: resource.into(), context: Context::new(), because: Some(why) }
}

/// The function a `FunctionName` (a `Ref` to a function) names.
fn function_of(v: &Value) -> Option<String> {
    v["Ref"].as_str().or_else(|| v["Fn::GetAtt"][0].as_str()).map(str::to_owned)
}

/// Every implicit requirement of every function of the stack.
pub fn requirements(p: &Principals) -> Result<Vec<Implicit>, RoleError> {
    let t = &p.template;
    let mut out = Vec::new();
    let queue_key = |arn: &str| p.facts.queue_keys.get(arn).cloned();
    for (id, m) in t.resources_of("AWS::Lambda::EventSourceMapping")? {
        let Some(function) = function_of(&m["Properties"]["FunctionName"]) else { continue };
        let source = t.string(&m["Properties"]["EventSourceArn"])?;
        if !source.starts_with("arn:aws:sqs:") {
            continue;
        }
        let principal = Principal::EventSourceMapping(function.clone());
        for action in ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"] {
            let why = format!("the event source mapping {id} polls {source} with {function}'s role");
            out.push(Implicit { principal: principal.clone(), requirement: plain(action, &source, why) });
        }
        if let Some(key) = queue_key(&source) {
            let why = format!("the event source mapping {id} receives from {source}, encrypted with {}", key.arn);
            out.push(Implicit { principal, requirement: kms("kms:Decrypt", &key, Some(&source), why) });
        }
    }
    for (id, c) in t.resources_of("AWS::Lambda::EventInvokeConfig")? {
        let Some(function) = function_of(&c["Properties"]["FunctionName"]) else { continue };
        let principal = Principal::Function(function.clone());
        for outcome in ["OnFailure", "OnSuccess"] {
            let d = &c["Properties"]["DestinationConfig"][outcome]["Destination"];
            if d.is_null() {
                continue;
            }
            let dest = t.string(d)?;
            let why = format!("{id}: Lambda sends {function}'s {outcome} records to {dest} with its role");
            if dest.starts_with("arn:aws:sqs:") {
                out.push(Implicit {
                    principal: principal.clone(),
                    requirement: plain("sqs:SendMessage", &dest, why.clone()),
                });
                if let Some(key) = queue_key(&dest) {
                    for action in ["kms:GenerateDataKey", "kms:Decrypt"] {
                        out.push(Implicit {
                            principal: principal.clone(),
                            requirement: kms(action, &key, Some(&dest), why.clone()),
                        });
                    }
                }
            } else if dest.starts_with("arn:aws:sns:") {
                out.push(Implicit { principal: principal.clone(), requirement: plain("sns:Publish", &dest, why) });
            } else if dest.starts_with("arn:aws:lambda:") {
                out.push(Implicit {
                    principal: principal.clone(),
                    requirement: plain("lambda:InvokeFunction", &dest, why),
                });
            } else {
                out.push(Implicit { principal: principal.clone(), requirement: plain("events:PutEvents", &dest, why) });
            }
        }
    }
    for (function, f) in t.resources_of("AWS::Lambda::Function")? {
        let principal = Principal::Function(function.clone());
        if let Some(k) = f["Properties"].get("KmsKeyArn") {
            let arn = t.string(k)?;
            if let Some(key) = t.kms_key(&arn)? {
                let why =
                    format!("Lambda decrypts {function}'s environment variables (KmsKeyArn) with its role at init");
                out.push(Implicit { principal: principal.clone(), requirement: kms("kms:Decrypt", &key, None, why) });
            }
        }
        let group = match f["Properties"]["LoggingConfig"].get("LogGroup") {
            Some(g) => t.string(g)?,
            None => format!("/aws/lambda/{}", t.physical_name(&function)?),
        };
        let stream = format!(
            "arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{group}:log-stream:2026/01/01/[$LATEST]0123456789abcdef"
        );
        for action in ["logs:CreateLogStream", "logs:PutLogEvents"] {
            let why = format!("Lambda writes {function}'s logs to {group} with its role");
            out.push(Implicit { principal: principal.clone(), requirement: plain(action, &stream, why) });
        }
    }
    Ok(out)
}

/// Evaluates every implicit requirement against its function's role: the grants that meet them
/// (for the coverage report) and a denial for each that is not met.
pub fn check(
    p: &Principals,
) -> Result<(std::collections::BTreeSet<super::coverage::Exercised>, Vec<super::Denial>), RoleError> {
    let mut exercised = std::collections::BTreeSet::new();
    let mut denials = Vec::new();
    for i in requirements(p)? {
        let Some(role) = p.role_of(&i.principal) else {
            return Err(RoleError::Unsupported(format!("{} has no role", i.principal)));
        };
        let r = &i.requirement;
        let ask = super::policy::Ask { action: &r.action, resource: &r.resource, context: &r.context };
        match super::policy::evaluate(&role.policies, &ask) {
            super::policy::Decision::Allowed(grants) => {
                exercised.extend(grants.into_iter().map(|grant| super::coverage::Exercised::new(&role.id, grant)))
            }
            decision => denials.push(super::gate::denial(
                &i.principal,
                role,
                "(no request: AWS acting with the role)",
                r,
                &decision,
            )),
        }
    }
    Ok((exercised, denials))
}
