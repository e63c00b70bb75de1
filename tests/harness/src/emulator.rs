//! moto in server mode: installed into a virtualenv under `target/` on first use (pinned
//! version, from PyPI), started on a free loopback port — behind the IAM gate (`crate::iam`): the
//! endpoint every client reaches is the gate's, and each request is checked against the policies
//! of the principal that signed it.
//!
//! Every test gets an emulator with nothing in it. Starting one costs about two seconds of CPU
//! (Python's start, then moto importing each service's backend on its first request: most of a
//! short test's time, measured on 2026-12-08), so a test's emulator is not stopped when the test
//! ends: it waits, idle, for the next test of the same process, which takes it after
//! `POST /moto-api/reset` (moto's backends, the End User Messaging stand-in and the logs shaping
//! all start empty again) and after its recorder is stopped and emptied. An idle emulator that
//! died or does not answer its reset is stopped and a fresh one started instead. Each one exits
//! when the test process does (its standard input is a pipe held by this process).

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use serde::Deserialize;

use crate::iam::{Gate, LOCAL_STACK, Principal};
use crate::{HarnessError, Result, workspace_root};

/// The emulator version every test and the demo run against.
pub const MOTO_VERSION: &str = "5.2.5";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SentSms {
    pub message_id: String,
    pub phone_number: String,
    pub message: String,
}

pub struct Emulator {
    /// Taken when dropped: given to [`IDLE`] for the process's next test.
    child: Option<Child>,
    port: u16,
    http: reqwest::Client,
    /// Closed when the emulator is handed on (or stopped); dropped after: reports the test's
    /// denials (and panics on any left).
    gate: Gate,
}

fn emulator_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("tocsin-emulator")
}

/// Installs moto once per machine and returns the virtualenv's Python.
pub fn ensure_installed() -> Result<PathBuf> {
    crate::python::ensure_venv(
        &emulator_dir(),
        &format!("venv-moto-{MOTO_VERSION}"),
        &[format!("moto[server]=={MOTO_VERSION}")],
    )
}

/// An HTTP client for moto's own endpoints that keeps no idle connection: werkzeug may close a
/// kept-alive one while a pool still holds it (see the gate's upstream client).
pub fn moto_http() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap_or_else(|_| reqwest::Client::new())
}

/// Emulators of tests that ended, alive and waiting for the next test of this process, by
/// launcher (`moto_serial.py`, or `moto_cfn.py` for [`crate::cloudformation`]).
static IDLE: Mutex<Vec<(&'static str, Child, u16)>> = Mutex::new(Vec::new());

/// The launcher of [`Emulator`]'s processes.
const LAUNCHER: &str = "moto_serial.py";

/// An emulator started by `launcher` that an earlier test of this process left, reset to empty;
/// `None` when there is none alive that answers its reset (those are stopped).
pub(crate) async fn take_idle(launcher: &'static str) -> Option<(Child, u16)> {
    loop {
        let (mut child, port) = {
            let mut idle = IDLE.lock().ok()?;
            let at = idle.iter().rposition(|(l, _, _)| *l == launcher)?;
            let (_, child, port) = idle.remove(at);
            (child, port)
        };
        if matches!(child.try_wait(), Ok(None)) && reset(port).await.is_ok() {
            return Some((child, port));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Leaves an emulator started by `launcher` for the process's next test; stops it instead when
/// it died, or when its gate was not `quiet` (a request of the test that ended may still reach it).
pub(crate) fn leave_idle(launcher: &'static str, mut child: Child, port: u16, quiet: bool) {
    match IDLE.lock() {
        Ok(mut idle) if quiet && matches!(child.try_wait(), Ok(None)) => idle.push((launcher, child, port)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Empties the emulator on `port`: every backend (`POST /moto-api/reset`, which also resets the
/// End User Messaging stand-in and the logs shaping: `moto_serial.py`), and its recorder.
async fn reset(port: u16) -> Result<()> {
    let http = moto_http();
    for path in ["moto-api/reset", "moto-api/recorder/stop-recording", "moto-api/recorder/reset-recording"] {
        let answer = http
            .post(format!("http://127.0.0.1:{port}/{path}"))
            .timeout(RESET_WITHIN)
            .send()
            .await
            .map_err(|e| HarnessError::Emulator(format!("{path}: {e}")))?;
        if !answer.status().is_success() {
            return Err(HarnessError::Emulator(format!("{path}: {}", answer.status())));
        }
    }
    Ok(())
}

/// How long an idle emulator may take over its reset before it is replaced by a fresh one.
const RESET_WITHIN: Duration = Duration::from_secs(15);

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A name for one emulator process, unique on this machine: `moto_serial.py` answers it at
/// `/tocsin-emulator/id`.
pub(crate) fn instance_id(port: u16) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{port}-{nanos}", std::process::id())
}

/// Whether the emulator on `port` is the one started as `id`. The port was free when picked and
/// released before moto bound it: a test running beside this one may have started its own emulator
/// there first (this one then exits, "Address already in use"). Answering its health check would
/// make two tests share one emulator, and the first to finish would stop it under the other.
pub(crate) async fn is_ours(http: &reqwest::Client, port: u16, id: &str) -> bool {
    match http.get(format!("http://127.0.0.1:{port}/tocsin-emulator/id")).send().await {
        Ok(r) if r.status().is_success() => r.text().await.is_ok_and(|t| t == id),
        _ => false,
    }
}

/// How CloudWatch Logs answers `FilterLogEvents` ([`Emulator::shape_logs`]): AWS's freedoms,
/// which moto does not take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogsShape {
    /// An event is searchable only this long after it was put (AWS: seconds, sometimes minutes).
    pub ingestion_delay: std::time::Duration,
    /// At most this many events a page (0: the request's limit).
    pub page_events: u32,
    /// Every n-th page comes back empty with a next token (0: never; 1 is refused).
    pub empty_every: u32,
}

impl Emulator {
    /// Installs (first time) and starts a fresh, empty emulator, with IAM enforced for the local
    /// stack (`tocsin-local`, the parameters' defaults).
    pub async fn start() -> Result<Self> {
        Self::start_for(&[]).await
    }

    /// As [`Emulator::start`], with IAM enforced for the local stack deployed with these template
    /// parameters (e.g. `SmsProvider=sns`: the roles' conditional statements follow them).
    pub async fn start_for(parameters: &[(&str, &str)]) -> Result<Self> {
        let server = tokio::task::spawn_blocking(ensure_installed)
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))??;
        let owned: Vec<(String, String)> = parameters.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let principals = tokio::task::spawn_blocking(move || {
            let borrowed: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            crate::iam::principals_with(LOCAL_STACK, &borrowed)
        })
        .await
        .map_err(|e| HarnessError::Emulator(e.to_string()))?
        .map_err(|e| HarnessError::Template(e.to_string()))?;
        let mut last = None;
        for _ in 0..3 {
            let started = match take_idle(LAUNCHER).await {
                Some(idle) => Ok(idle),
                None => Self::spawn(&server).await,
            };
            match started {
                Ok((mut child, port)) => match Gate::start(&format!("http://127.0.0.1:{port}"), principals).await {
                    Ok(gate) => return Ok(Emulator { child: Some(child), port, http: moto_http(), gate }),
                    Err(e) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(e);
                    }
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Emulator("could not start".into())))
    }

    async fn spawn(server: &Path) -> Result<(Child, u16)> {
        Self::spawn_on(server, free_port()?).await
    }

    /// Starts moto on `port`; answers once that emulator, and no other, answers there.
    async fn spawn_on(server: &Path, port: u16) -> Result<(Child, u16)> {
        let logs = emulator_dir().join("logs");
        fs::create_dir_all(&logs)?;
        let log = File::create(logs.join(format!("moto-{port}.log")))?;
        let workdir = emulator_dir().join("run").join(port.to_string());
        fs::create_dir_all(&workdir)?;
        // moto's own server, with requests applied one at a time (see moto_serial.py).
        let launcher = Path::new(env!("CARGO_MANIFEST_DIR")).join(LAUNCHER);
        let id = instance_id(port);
        let child = Command::new(server)
            .arg(launcher)
            .args(["127.0.0.1", &port.to_string()])
            .current_dir(&workdir)
            .env("MOTO_RECORDER_FILEPATH", workdir.join("recording.jsonl"))
            .env("TOCSIN_EMULATOR_ID", &id)
            // Its lifeline: it exits when this process ends and the pipe closes.
            .env("TOCSIN_EMULATOR_STDIN_LIFELINE", "1")
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| HarnessError::Emulator(format!("cannot start {}: {e}", server.display())))?;
        let mut child = child;
        let http = moto_http();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(HarnessError::Emulator(format!(
                    "moto_server exited at start ({status}); see {}",
                    logs.display()
                )));
            }
            if is_ours(&http, port, &id).await {
                return Ok((child, port));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Emulator("moto_server did not answer within 20 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The endpoint every client reaches: the IAM gate in front of moto.
    pub fn endpoint(&self) -> String {
        self.gate.endpoint()
    }

    /// moto itself, behind the gate (its own `/moto-api/` endpoints).
    pub fn moto_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The IAM gate: its denials, what it saw exercised, its principals' policies.
    pub fn iam(&self) -> &Gate {
        &self.gate
    }

    /// The environment a process signing as `principal` needs to reach this emulator through the
    /// SDK's standard variables (no code path of the functions knows it is local).
    pub fn aws_env(&self, principal: &Principal) -> Vec<(String, String)> {
        aws_env_for(&self.endpoint(), principal)
    }

    /// SDK configuration for `principal`, pointed at `endpoint` (this emulator, or a fault proxy
    /// in front of it).
    pub async fn sdk_config_for(endpoint: &str, principal: &Principal) -> SdkConfig {
        // The SDK's standard retries, with a short backoff: faults are injected by the thousand.
        let retry = aws_config::retry::RetryConfig::standard()
            .with_initial_backoff(std::time::Duration::from_millis(10))
            .with_max_backoff(std::time::Duration::from_millis(200));
        aws_config::defaults(BehaviorVersion::latest())
            .retry_config(retry)
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                principal.access_key_id(),
                crate::iam::SECRET,
                None,
                None,
                "tocsin-harness",
            ))
            .load()
            .await
    }

    /// The harness's own SDK configuration (provisioning, the test's reads, AWS played by the
    /// harness): not checked by the gate.
    pub async fn sdk_config(&self) -> SdkConfig {
        Self::sdk_config_for(&self.endpoint(), &Principal::Harness).await
    }

    /// SDK configuration for `principal`, straight to the gate.
    pub async fn sdk_config_as(&self, principal: &Principal) -> SdkConfig {
        Self::sdk_config_for(&self.endpoint(), principal).await
    }

    /// The End User Messaging stand-in's control API (carriers, throttling, the account, the
    /// messages it accepted): see [`crate::eum`].
    pub fn eum(&self) -> crate::eum::EumControl {
        crate::eum::EumControl::new(&self.moto_endpoint())
    }

    /// Makes `FilterLogEvents` answer as AWS may (`tests/harness/logs_as_aws.py`): events hidden
    /// until `shape.ingestion_delay` after they were put, pages of at most `shape.page_events`
    /// events, and every `shape.empty_every`-th page empty with a next token.
    /// `LogsShape::default()` restores moto's at-once, whole answers.
    pub async fn shape_logs(&self, shape: LogsShape) -> Result<()> {
        let body = serde_json::json!({
            "ingestion_delay_ms": u64::try_from(shape.ingestion_delay.as_millis()).unwrap_or(u64::MAX),
            "page_events": shape.page_events,
            "empty_every": shape.empty_every,
        });
        let url = format!("{}/tocsin-logs/shape", self.moto_endpoint());
        let response =
            self.http.post(url).json(&body).send().await.map_err(|e| HarnessError::Emulator(e.to_string()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            let text = response.text().await.unwrap_or_default();
            Err(HarnessError::Emulator(format!("/tocsin-logs/shape: {text}")))
        }
    }

    /// Every log event of `log_group` so far, oldest first, read with `FilterLogEvents` as the
    /// harness (the shape a subscription hands a function: [`crate::events::logs_payload`]).
    pub async fn log_events(&self, log_group: &str) -> Result<Vec<crate::events::LogLine>> {
        let logs = aws_sdk_cloudwatchlogs::Client::new(&self.sdk_config().await);
        let mut lines = Vec::new();
        let mut token = None;
        loop {
            let page = logs
                .filter_log_events()
                .log_group_name(log_group)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| crate::aws_err("FilterLogEvents", e))?;
            for e in page.events() {
                lines.push(crate::events::LogLine {
                    id: e.event_id().unwrap_or_default().to_owned(),
                    timestamp: e.timestamp().unwrap_or_default(),
                    message: e.message().unwrap_or_default().to_owned(),
                });
            }
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        lines.sort_by_key(|l| l.timestamp);
        Ok(lines)
    }

    /// Every SMS "sent" through SNS so far, in publish order.
    pub async fn sent_sms(&self) -> Result<Vec<SentSms>> {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/moto-api/data.json", self.moto_endpoint()))
            .send()
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?
            .json()
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?;
        let list = v.pointer("/sns/SMS").cloned().unwrap_or(serde_json::Value::Array(vec![]));
        serde_json::from_value(list).map_err(|e| HarnessError::Emulator(format!("unexpected SMS list: {e}")))
    }

    /// Starts recording every API call (for counting calls per alert).
    pub async fn start_recording(&self) -> Result<()> {
        for path in ["reset-recording", "start-recording"] {
            self.http
                .post(format!("{}/moto-api/recorder/{path}", self.moto_endpoint()))
                .send()
                .await
                .map_err(|e| HarnessError::Emulator(e.to_string()))?;
        }
        Ok(())
    }

    /// Stops recording and returns one `Service.Operation` name per recorded AWS call.
    pub async fn stop_recording(&self) -> Result<Vec<String>> {
        Ok(self.stop_recording_requests().await?.into_iter().map(|r| r.operation).collect())
    }

    /// Stops recording and returns every recorded AWS call with its body, in order.
    pub async fn stop_recording_requests(&self) -> Result<Vec<RecordedRequest>> {
        self.http
            .post(format!("{}/moto-api/recorder/stop-recording", self.moto_endpoint()))
            .send()
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?;
        let text = self
            .http
            .get(format!("{}/moto-api/recorder/download-recording", self.moto_endpoint()))
            .send()
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?
            .text()
            .await
            .map_err(|e| HarnessError::Emulator(e.to_string()))?;
        Ok(text.lines().filter_map(RecordedRequest::parse).collect())
    }
}

/// One AWS call the emulator's recorder saw.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `Service.Operation`: `DynamoDB_20120810.GetItem`, `SNS.Publish`.
    pub operation: String,
    /// The body: JSON for the JSON protocols, `Null` for the query protocol (SNS) and for a body
    /// that is not JSON.
    pub body: serde_json::Value,
}

impl RecordedRequest {
    /// One line of moto's recording, or `None` for the emulator's own endpoints.
    fn parse(line: &str) -> Option<RecordedRequest> {
        use base64::Engine;
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let url = v.get("url")?.as_str()?;
        if url.contains("/moto-api/") {
            return None;
        }
        let body = v.get("body").and_then(|b| b.as_str()).unwrap_or_default();
        let raw = if v.get("body_encoded").and_then(|b| b.as_bool()).unwrap_or(false) {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(body).ok()?).ok()?
        } else {
            body.to_owned()
        };
        let headers = v.get("headers")?.as_object()?;
        let target = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-amz-target")).and_then(|(_, v)| v.as_str());
        if let Some(t) = target {
            let body = serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null);
            return Some(RecordedRequest { operation: t.to_owned(), body });
        }
        let action = raw.split('&').find_map(|kv| kv.strip_prefix("Action="))?;
        Some(RecordedRequest { operation: format!("SNS.{action}"), body: serde_json::Value::Null })
    }
}

/// The standard AWS variables for a process signing as `principal` against `endpoint`.
pub fn aws_env_for(endpoint: &str, principal: &Principal) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), endpoint.to_owned()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), principal.access_key_id()),
        ("AWS_SECRET_ACCESS_KEY".into(), crate::iam::SECRET.into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
    ]
}

impl Drop for Emulator {
    /// The emulator waits for the process's next test, which resets it before use — once its gate
    /// forwards nothing more.
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            leave_idle(LAUNCHER, child, self.port, self.gate.close());
        }
    }
}

#[cfg(test)]
mod port_race {
    use super::*;

    /// Two tests picked the same free port: the second emulator cannot bind it and must not
    /// take the first one's health for its own (the two tests would share one emulator, and the
    /// first to end would stop it under the other: `IncompleteMessage` in the middle of a test).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_emulator_on_a_taken_port_fails_to_start_instead_of_answering_with_the_first() {
        let first = Emulator::start().await.expect("the first emulator");
        let server = tokio::task::spawn_blocking(ensure_installed).await.expect("join").expect("installed");
        let second = Emulator::spawn_on(&server, first.port).await;
        assert!(
            matches!(&second, Err(HarnessError::Emulator(m)) if m.contains("exited at start")),
            "the second start must fail, not answer with the first emulator: {:?}",
            second.as_ref().map(|(_, port)| port)
        );
        assert!(!is_ours(&first.http, first.port, "someone else").await, "an id that is not its own");
    }
}

#[cfg(test)]
mod reuse {
    use super::*;
    use crate::eum::AccountTier;
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};

    /// An on-demand table `name` keyed by the string `pk`.
    pub(super) async fn create_table(ddb: &aws_sdk_dynamodb::Client, name: &str) {
        let attribute =
            AttributeDefinition::builder().attribute_name("pk").attribute_type(ScalarAttributeType::S).build();
        let key = KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build();
        ddb.create_table()
            .table_name(name)
            .attribute_definitions(attribute.expect("attribute"))
            .key_schema(key.expect("key"))
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .expect("CreateTable");
    }

    /// An emulator a test leaves is the next test's only once emptied: its reset leaves no
    /// table, queue, log group, sent SMS, End User Messaging account state or recording of the
    /// test before. (Without it, one test's items and faults would meet the next test's.)
    #[tokio::test]
    async fn an_emulator_reset_for_the_next_test_holds_nothing_the_last_test_left() {
        let emulator = Emulator::start().await.expect("emulator");
        let sdk = emulator.sdk_config().await;
        let (ddb, sqs, logs, sns) = (
            aws_sdk_dynamodb::Client::new(&sdk),
            aws_sdk_sqs::Client::new(&sdk),
            aws_sdk_cloudwatchlogs::Client::new(&sdk),
            aws_sdk_sns::Client::new(&sdk),
        );
        create_table(&ddb, "left-behind").await;
        sqs.create_queue().queue_name("left-behind").send().await.expect("CreateQueue");
        logs.create_log_group().log_group_name("left-behind").send().await.expect("CreateLogGroup");
        sns.publish().phone_number("+12065550100").message("left behind").send().await.expect("Publish");
        emulator.eum().production_account().await.expect("production account");
        emulator.start_recording().await.expect("recording");
        assert_eq!(emulator.sent_sms().await.expect("sent SMS").len(), 1, "the SMS is there before the reset");

        reset(emulator.port).await.expect("reset");

        let tables = ddb.list_tables().send().await.expect("ListTables");
        assert!(tables.table_names().is_empty(), "tables left: {:?}", tables.table_names());
        let queues = sqs.list_queues().send().await.expect("ListQueues");
        assert!(queues.queue_urls().is_empty(), "queues left: {:?}", queues.queue_urls());
        let groups = logs.describe_log_groups().send().await.expect("DescribeLogGroups");
        assert!(groups.log_groups().is_empty(), "log groups left: {:?}", groups.log_groups());
        assert!(emulator.sent_sms().await.expect("sent SMS").is_empty(), "SMS left");
        assert_eq!(
            emulator.eum().state().await.expect("stand-in").tier,
            AccountTier::Sandboxed,
            "the account left in production"
        );
        assert!(emulator.stop_recording().await.expect("recording").is_empty(), "a recording left running");
    }

    /// A test's emulator is handed on only when its gate forwards nothing more: a request that
    /// comes after (a task the test left running) is dropped at the gate, never applied to what
    /// is by then the next test's emulator.
    #[tokio::test]
    async fn a_request_through_a_closed_gate_never_reaches_the_emulator() {
        let emulator = Emulator::start().await.expect("emulator");
        let through_gate = aws_sdk_sqs::Client::new(&emulator.sdk_config().await);
        assert!(emulator.iam().close(), "nothing in flight when the test ends");

        let late = through_gate.create_queue().queue_name("too-late").send().await;

        assert!(late.is_err(), "the gate forwarded a request after it was closed");
        let direct = Emulator::sdk_config_for(&emulator.moto_endpoint(), &Principal::Harness).await;
        let queues = aws_sdk_sqs::Client::new(&direct).list_queues().send().await.expect("ListQueues");
        assert!(queues.queue_urls().is_empty(), "the late request was applied: {:?}", queues.queue_urls());
    }
}

#[cfg(test)]
mod item_writes {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    const ROUNDS: u64 = 150;
    const WRITERS: u64 = 8;

    /// DynamoDB applies the writes to one item one at a time: of several conditional updates
    /// that all expect the same version, exactly one passes. moto's threaded server alone can let
    /// two pass (issue 35: two senders both claimed one intent); the lock in `moto_serial.py` is
    /// what makes the emulator answer as AWS does. With the lock taken out this fails
    /// (docs/testing.md, "The emulator serialises item writes").
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn of_concurrent_conditional_writes_to_one_item_exactly_one_passes() {
        let emulator = Emulator::start().await.expect("emulator");
        let ddb = aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await);
        super::reuse::create_table(&ddb, "race").await;
        let claim = || AttributeValue::S("claim".into());
        let number = |n: u64| AttributeValue::N(n.to_string());
        ddb.put_item().table_name("race").item("pk", claim()).item("v", number(0)).send().await.expect("PutItem");
        for round in 0..ROUNDS {
            let mut writers = tokio::task::JoinSet::new();
            for w in 0..WRITERS {
                let update = ddb
                    .update_item()
                    .table_name("race")
                    .key("pk", claim())
                    .update_expression("SET v = :next, w = :w")
                    .condition_expression("v = :expected")
                    .expression_attribute_values(":expected", number(round))
                    .expression_attribute_values(":next", number(round + 1))
                    .expression_attribute_values(":w", number(w));
                writers.spawn(async move {
                    match update.send().await {
                        Ok(_) => true,
                        Err(e) if e.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => {
                            false
                        }
                        Err(e) => panic!("UpdateItem: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)),
                    }
                });
            }
            let passed = writers.join_all().await.into_iter().filter(|passed| *passed).count();
            assert_eq!(
                passed, 1,
                "round {round}: {passed} of {WRITERS} conditional writes expecting v = {round} passed"
            );
        }
    }
}
