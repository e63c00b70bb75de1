//! The stack's CloudFormation outputs on the emulator. A deployed tocsin stack describes itself
//! through its outputs (table names, queue URLs, log groups, the API's URL…), and the operator CLI
//! reads nothing else. Locally the resources are provisioned one by one (`stack.rs`), so this
//! module resolves `template.yaml`'s own `Outputs` against them and registers a CloudFormation
//! stack of that name on the emulator that carries exactly those values: `DescribeStacks` then
//! answers as on AWS.
//!
//! Outputs whose `Condition` is false are left out, as on AWS; so are those naming what the
//! emulator does not host (the HTTP API, the functions, the dashboard, IAM roles) — unless a test
//! supplies a value (e.g. `AlertApiUrl` pointing at a local stand-in for API Gateway).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use serde_yaml_ng::Value as Yaml;

use crate::stack::Stack;
use crate::{HarnessError, Result};

/// `template.yaml`'s outputs resolved for this stack (see the module comment for what is left out).
pub fn resolved(stack: &Stack) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Some(outputs) = stack.template().get("Outputs").and_then(Yaml::as_mapping) else {
        return Ok(out);
    };
    for (k, o) in outputs {
        let Some(k) = k.as_str() else { continue };
        if let Some(c) = o.get("Condition").and_then(Yaml::as_str)
            && !stack.condition(c)?
        {
            continue;
        }
        let Some(v) = o.get("Value") else { continue };
        if let Ok(value) = stack.resolve(v) {
            out.insert(k.to_owned(), value);
        }
    }
    Ok(out)
}

/// Registers stack `name` on the emulator at `endpoint` with `template.yaml`'s resolved outputs
/// plus `extra` (which win), replacing a stack of that name. The stack holds one placeholder
/// resource moto accepts and skips.
pub async fn publish(endpoint: &str, stack: &Stack, name: &str, extra: &[(&str, &str)]) -> Result<()> {
    let mut values = resolved(stack)?;
    for (k, v) in extra {
        values.insert((*k).to_owned(), (*v).to_owned());
    }
    let outputs: serde_json::Map<String, Value> = values.into_iter().map(|(k, v)| (k, json!({ "Value": v }))).collect();
    let template = json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "tocsin resources provisioned locally from template.yaml (tests/harness)",
        "Resources": { "Provisioned": { "Type": "AWS::CloudFormation::WaitConditionHandle" } },
        "Outputs": outputs,
    });
    // An earlier registration of the same name goes first (DeleteStack of no stack is a no-op).
    let _ = call(
        endpoint,
        &[("Action", "DeleteStack".to_owned()), ("Version", "2010-05-15".to_owned()), ("StackName", name.to_owned())],
    )
    .await;
    let form = [
        ("Action", "CreateStack".to_owned()),
        ("Version", "2010-05-15".to_owned()),
        ("StackName", name.to_owned()),
        ("TemplateBody", template.to_string()),
    ];
    let resp = call(endpoint, &form).await?;
    if resp.status().is_success() {
        return Ok(());
    }
    let text = resp.text().await.unwrap_or_default();
    Err(HarnessError::Aws("CloudFormation CreateStack", text.chars().take(400).collect()))
}

/// One CloudFormation query-API call, as the harness.
async fn call(endpoint: &str, form: &[(&str, String)]) -> Result<reqwest::Response> {
    let name = form.iter().find(|(k, _)| *k == "StackName").map(|(_, v)| v.clone()).unwrap_or_default();
    let body = form.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect::<Vec<_>>().join("&");
    reqwest::Client::new()
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
        // moto routes a request by the service in the credential scope; it checks no signature.
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=HARNESS/20260101/us-east-1/cloudformation/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| HarnessError::Emulator(format!("CloudFormation {name}: {e}")))
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
