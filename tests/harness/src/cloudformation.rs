//! Deploying the translated template with CloudFormation on the emulator: moto's CloudFormation
//! (the same pinned moto, started by `moto_cfn.py`, which adds the resource types moto lacks —
//! `AWS::Logs::SubscriptionFilter`, `AWS::SNS::Subscription`, `AWS::Scheduler::Schedule` and End
//! User Messaging's `AWS::SMSVOICE::ConfigurationSet`, made in the stand-in of the same process)
//! reached over its query API on loopback, and the reduction that makes the translated template
//! deployable there.
//!
//! Like [`crate::Emulator`], it sits behind the IAM gate: a process signing as a function or as
//! the operator is checked against the policies of the stack created last (its roles as
//! translated with that stack's parameters, the operator policy for that stack name).
//!
//! moto's `CreateStack` runs synchronously: a resource that fails makes the call fail with that
//! service's error (e.g. `ResourceAlreadyExistsException`, `LimitExceededException`; for a
//! registry resource type, CloudFormation's handler error code such as `AlreadyExists`), and
//! `moto_cfn.py` rolls the stack back as CloudFormation does (`ROLLBACK_COMPLETE`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::iam::{Gate, LOCAL_STACK, principals_for, principals_with};
use crate::{HarnessError, Result, workspace_root};

/// Why CloudFormation refused a stack operation: the error code and message it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackFailure {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for StackFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// moto in server mode with CloudFormation able to create subscription filters. Left for the
/// process's next test when dropped, which takes it reset to empty (as [`crate::Emulator`]).
pub struct CloudFormationEmulator {
    /// Taken when dropped.
    child: Option<Child>,
    port: u16,
    http: reqwest::Client,
    gate: Gate,
}

impl CloudFormationEmulator {
    pub async fn start() -> Result<Self> {
        let (mut child, port) = match crate::emulator::take_idle(LAUNCHER).await {
            Some(idle) => idle,
            None => Self::spawn().await?,
        };
        let gate = match Self::gate(&format!("http://127.0.0.1:{port}"), LOCAL_STACK).await {
            Ok(g) => g,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        Ok(CloudFormationEmulator { child: Some(child), port, http: reqwest::Client::new(), gate })
    }

    /// Starts `moto_cfn.py` on a free port; answers once that process, and no other, answers.
    async fn spawn() -> Result<(Child, u16)> {
        let python = tokio::task::spawn_blocking(crate::emulator::ensure_installed)
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))??;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"))
            .join("tocsin-emulator");
        let workdir = dir.join("run").join(format!("cfn-{port}"));
        fs::create_dir_all(&workdir)?;
        let log = File::create(workdir.join("moto.log"))?;
        let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join(LAUNCHER);
        let id = crate::emulator::instance_id(port);
        let child = Command::new(&python)
            .arg(launcher)
            .args(["127.0.0.1", &port.to_string()])
            .current_dir(&workdir)
            .env("TOCSIN_EMULATOR_ID", &id)
            // Its lifeline: it exits when this process ends and the pipe closes.
            .env("TOCSIN_EMULATOR_STDIN_LIFELINE", "1")
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| HarnessError::Emulator(format!("cannot start {}: {e}", python.display())))?;
        let mut child = child;
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(HarnessError::Emulator(format!(
                    "moto_cfn.py exited at start ({status}); see {}",
                    workdir.display()
                )));
            }
            if crate::emulator::is_ours(&http, port, &id).await {
                return Ok((child, port));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Emulator("moto_cfn.py did not answer within 20 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn gate(upstream: &str, stack: &str) -> Result<Gate> {
        let stack = stack.to_owned();
        let principals = tokio::task::spawn_blocking(move || principals_for(&stack))
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?
            .map_err(|e| HarnessError::Template(e.to_string()))?;
        Gate::start(upstream, principals).await
    }

    /// The endpoint every client reaches: the IAM gate in front of moto.
    pub fn endpoint(&self) -> String {
        self.gate.endpoint()
    }

    /// moto itself, behind the gate.
    pub fn moto_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The IAM gate.
    pub fn iam(&self) -> &Gate {
        &self.gate
    }

    /// Checks functions and the operator against stack `name`'s policies from now on.
    pub async fn enforce_for(&self, name: &str) -> Result<()> {
        self.enforce_for_stack(name, &[]).await
    }

    /// [`Self::enforce_for`] for a stack deployed with these parameters (its roles' conditional
    /// statements follow them: the provider's, say).
    pub async fn enforce_for_stack(&self, name: &str, parameters: &[(&str, &str)]) -> Result<()> {
        let stack = name.to_owned();
        let parameters: Vec<(String, String)> =
            parameters.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let principals = tokio::task::spawn_blocking(move || {
            let p: Vec<(&str, &str)> = parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            principals_with(&stack, &p)
        })
        .await
        .map_err(|e| HarnessError::Emulator(e.to_string()))?
        .map_err(|e| HarnessError::Template(e.to_string()))?;
        self.gate.enforce(principals);
        Ok(())
    }

    /// Another gate, enforcing the same policies, in front of `upstream` (a stand-in for what
    /// moto does not serve, so that its answers are authorized too).
    pub async fn gate_in_front_of(&self, upstream: &str) -> Result<Gate> {
        Gate::start(upstream, self.gate.principals()).await
    }

    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        crate::Emulator::sdk_config_for(&self.endpoint(), &crate::iam::Principal::Harness).await
    }

    /// One CloudFormation query-API call; `Ok(Err(..))` when CloudFormation refused it.
    async fn call(&self, params: &[(String, String)]) -> Result<std::result::Result<String, StackFailure>> {
        let body = params.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&");
        let resp = self
            .http
            .post(self.endpoint())
            .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
            // moto routes a request by the service in the credential scope; it checks no signature.
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=HARNESS/20260101/us-east-1/cloudformation/aws4_request, \
                 SignedHeaders=host, Signature=0",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| HarnessError::Emulator(format!("CloudFormation: {e}")))?;
        let ok = resp.status().is_success();
        let text = resp.text().await.map_err(|e| HarnessError::Emulator(format!("CloudFormation: {e}")))?;
        Ok(if ok { Ok(text) } else { Err(failure_of(&text)) })
    }

    /// CreateStack with a JSON template and parameter values.
    pub async fn create_stack(
        &self,
        name: &str,
        template: &Value,
        parameters: &[(&str, &str)],
    ) -> Result<std::result::Result<(), StackFailure>> {
        self.deploy("CreateStack", name, template, parameters).await
    }

    /// UpdateStack with a new JSON template. Parameters not given take the template's defaults,
    /// as on AWS (the previous values only with UsePreviousValue, which this does not send).
    pub async fn update_stack(
        &self,
        name: &str,
        template: &Value,
        parameters: &[(&str, &str)],
    ) -> Result<std::result::Result<(), StackFailure>> {
        self.deploy("UpdateStack", name, template, parameters).await
    }

    /// CreateStack or UpdateStack; once it succeeds, the IAM gate enforces the stack's roles as
    /// deployed with these parameters.
    async fn deploy(
        &self,
        action: &str,
        name: &str,
        template: &Value,
        parameters: &[(&str, &str)],
    ) -> Result<std::result::Result<(), StackFailure>> {
        let mut p = vec![
            ("Action".to_owned(), action.to_owned()),
            ("Version".to_owned(), "2010-05-15".to_owned()),
            ("StackName".to_owned(), name.to_owned()),
            ("TemplateBody".to_owned(), template.to_string()),
            ("Capabilities.member.1".to_owned(), "CAPABILITY_IAM".to_owned()),
            ("Capabilities.member.2".to_owned(), "CAPABILITY_AUTO_EXPAND".to_owned()),
        ];
        for (i, (k, v)) in parameters.iter().enumerate() {
            p.push((format!("Parameters.member.{}.ParameterKey", i + 1), (*k).to_owned()));
            p.push((format!("Parameters.member.{}.ParameterValue", i + 1), (*v).to_owned()));
        }
        let done = self.call(&p).await?.map(|_| ());
        if done.is_ok() {
            self.enforce_for_stack(name, parameters).await?;
        }
        Ok(done)
    }

    /// The stack's outputs (`DescribeStacks`), by key.
    pub async fn stack_outputs(
        &self,
        name: &str,
    ) -> Result<std::result::Result<BTreeMap<String, String>, StackFailure>> {
        let p = [
            ("Action".to_owned(), "DescribeStacks".to_owned()),
            ("Version".to_owned(), "2010-05-15".to_owned()),
            ("StackName".to_owned(), name.to_owned()),
        ];
        Ok(self.call(&p).await?.map(|xml| outputs_of(&xml)))
    }

    /// The stack's status (`CREATE_COMPLETE`, `DELETE_COMPLETE`, ...).
    pub async fn stack_status(&self, name: &str) -> Result<std::result::Result<String, StackFailure>> {
        let p = [
            ("Action".to_owned(), "DescribeStacks".to_owned()),
            ("Version".to_owned(), "2010-05-15".to_owned()),
            ("StackName".to_owned(), name.to_owned()),
        ];
        Ok(self.call(&p).await?.map(|xml| element(&xml, "StackStatus").unwrap_or_default()))
    }

    /// DeleteStack (resources with `DeletionPolicy: Retain` stay).
    pub async fn delete_stack(&self, name: &str) -> Result<std::result::Result<(), StackFailure>> {
        let p = [
            ("Action".to_owned(), "DeleteStack".to_owned()),
            ("Version".to_owned(), "2010-05-15".to_owned()),
            ("StackName".to_owned(), name.to_owned()),
        ];
        Ok(self.call(&p).await?.map(|_| ()))
    }
}

impl Drop for CloudFormationEmulator {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::emulator::leave_idle(LAUNCHER, child, self.port, self.gate.close());
        }
    }
}

/// The launcher of [`CloudFormationEmulator`]'s processes.
const LAUNCHER: &str = "moto_cfn.py";

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

fn element(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(unescape(&xml[start..end]))
}

/// XML's five predefined entities (what moto's answers escape).
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// `OutputKey` → `OutputValue` of every `<member>` in a DescribeStacks answer's `<Outputs>`.
fn outputs_of(xml: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(outputs) = xml.split_once("<Outputs>").and_then(|(_, r)| r.split_once("</Outputs>")).map(|(o, _)| o)
    else {
        return out;
    };
    for member in outputs.split("<member>").skip(1) {
        if let Some(key) = element(member, "OutputKey") {
            out.insert(key, element(member, "OutputValue").unwrap_or_default());
        }
    }
    out
}

/// CloudFormation's own errors come as query-API XML; a resource's service error is passed on
/// by moto as that service's JSON (`__type`, `message`).
fn failure_of(body: &str) -> StackFailure {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let code = v.get("__type").and_then(Value::as_str).unwrap_or_default();
        let code = code.rsplit('#').next().unwrap_or(code).to_owned();
        let message =
            v.get("message").or_else(|| v.get("Message")).and_then(Value::as_str).unwrap_or_default().to_owned();
        return StackFailure { code, message };
    }
    StackFailure {
        code: element(body, "Code").unwrap_or_default(),
        message: element(body, "Message").unwrap_or_else(|| body.chars().take(300).collect()),
    }
}

/// The translated template reduced to what moto's CloudFormation can create, and the logical ids
/// taken out. Everything else is deployed as translated:
/// - every `AWS::Lambda::Function` gets a stub `ZipFile` instead of its S3 artifact (the bucket
///   `sam deploy` uploads to does not exist here; moto runs no code at creation);
/// - `AWS::Events::Rule` is taken out: moto resolves a `Ref` to a `CommaDelimitedList` parameter
///   (the rule's `source` list) to a string and rejects the pattern;
/// - `Custom::*` is taken out: moto answers a custom resource by invoking its function, which
///   needs Docker;
/// - so is every resource or output that references (or `DependsOn`) one taken out.
///
/// Types moto's CloudFormation does not know (alarms, schedules, the HTTP API, event invoke
/// configs) are accepted and skipped by moto itself.
pub fn deployable_on_emulator(translated: &Value) -> (Value, BTreeSet<String>) {
    let mut t = translated.clone();
    let mut dropped: BTreeSet<String> = BTreeSet::new();
    let Some(resources) = t.get_mut("Resources").and_then(Value::as_object_mut) else {
        return (t, dropped);
    };
    for (id, r) in resources.iter() {
        let ty = r.get("Type").and_then(Value::as_str).unwrap_or_default();
        if ty == "AWS::Events::Rule" || ty.starts_with("Custom::") {
            dropped.insert(id.clone());
        }
    }
    loop {
        let more: Vec<String> = resources
            .iter()
            .filter(|(id, r)| !dropped.contains(*id) && !references(r).is_disjoint(&dropped))
            .map(|(id, _)| id.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        dropped.extend(more);
    }
    resources.retain(|id, _| !dropped.contains(id));
    for r in resources.values_mut() {
        if r.get("Type").and_then(Value::as_str) == Some("AWS::Lambda::Function")
            && let Some(props) = r.get_mut("Properties").and_then(Value::as_object_mut)
        {
            props.insert("Code".into(), json!({ "ZipFile": "stub: moto runs no code at creation" }));
        }
    }
    if let Some(outputs) = t.get_mut("Outputs").and_then(Value::as_object_mut) {
        outputs.retain(|_, o| references(o).is_disjoint(&dropped));
    }
    (t, dropped)
}

/// Logical ids a template fragment references: `Ref`, `Fn::GetAtt`, `${X}` / `${X.Attr}` in
/// `Fn::Sub`, and `DependsOn`.
pub fn references(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    collect_references(v, &mut out);
    out
}

fn collect_references(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("Ref", Value::String(s)) => {
                        out.insert(s.clone());
                    }
                    ("Fn::GetAtt", Value::Array(a)) => {
                        if let Some(s) = a.first().and_then(Value::as_str) {
                            out.insert(s.to_owned());
                        }
                    }
                    ("Fn::GetAtt", Value::String(s)) => {
                        out.insert(s.split('.').next().unwrap_or_default().to_owned());
                    }
                    ("Fn::Sub", Value::String(s)) => sub_variables(s, out),
                    ("Fn::Sub", Value::Array(a)) => {
                        // Names defined in the variable map are not logical ids; their values may hold some.
                        let vars = a.get(1).and_then(Value::as_object);
                        let mut inner = BTreeSet::new();
                        if let Some(s) = a.first().and_then(Value::as_str) {
                            sub_variables(s, &mut inner);
                        }
                        out.extend(inner.into_iter().filter(|n| vars.is_none_or(|m| !m.contains_key(n))));
                        for val in vars.into_iter().flat_map(|m| m.values()) {
                            collect_references(val, out);
                        }
                    }
                    ("DependsOn", Value::String(s)) => {
                        out.insert(s.clone());
                    }
                    ("DependsOn", Value::Array(a)) => out.extend(a.iter().filter_map(Value::as_str).map(str::to_owned)),
                    _ => collect_references(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_references(x, out)),
        _ => {}
    }
}

fn sub_variables(s: &str, out: &mut BTreeSet<String>) {
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let var = &after[..end];
        if !var.starts_with('!') && !var.starts_with("AWS::") {
            out.insert(var.split('.').next().unwrap_or_default().to_owned());
        }
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_read_by_key_with_xml_entities_undone() {
        let xml = "<DescribeStacksResponse><DescribeStacksResult><Stacks><member><StackName>s</StackName>\
                   <Outputs><member><OutputKey>Url</OutputKey><OutputValue>https://x/?a=1&amp;b=&lt;2&gt;</OutputValue>\
                   </member><member><Description>d</Description><OutputKey>Name</OutputKey><OutputValue>tocsin-prod</OutputValue>\
                   </member></Outputs><StackStatus>CREATE_COMPLETE</StackStatus></member></Stacks></DescribeStacksResult>\
                   </DescribeStacksResponse>";
        let outputs = outputs_of(xml);
        assert_eq!(outputs.get("Url").map(String::as_str), Some("https://x/?a=1&b=<2>"));
        assert_eq!(outputs.get("Name").map(String::as_str), Some("tocsin-prod"));
        assert_eq!(outputs.len(), 2);
        assert_eq!(element(xml, "StackStatus").as_deref(), Some("CREATE_COMPLETE"));
        assert!(outputs_of("<Stacks><member><StackName>s</StackName></member></Stacks>").is_empty(), "no outputs");
    }
}
