//! The deployment the simulation runs: read from `template.yaml` itself, so the simulated stack
//! has the functions' environments, timeouts, the sender's event source mapping (batch size,
//! batching window, maximum concurrency), the queues' visibility timeouts and redrive, the status
//! function's async retries and the sweep's schedule exactly as deployed. Parameters take their
//! defaults unless a workload overrides them (storm mode on or off, the SMS rate).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_yaml_ng::Value;
use tocsin::config::{ConfigError, Env, EscalationConfig, IntakeConfig, RepliesConfig, SenderConfig, StatusConfig};

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error("template.yaml: {0}")]
    Template(String),
    #[error("{function}: {source}")]
    Config { function: &'static str, source: ConfigError },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// The sender's SQS event source mapping.
#[derive(Debug, Clone)]
pub struct EventSourceMapping {
    pub batch_size: usize,
    pub batching_window: Duration,
    pub max_concurrency: usize,
}

#[derive(Debug, Clone)]
pub struct Deployment {
    pub intake: IntakeConfig,
    pub sender: SenderConfig,
    pub status: StatusConfig,
    pub escalation: EscalationConfig,
    /// The replies function (issue 37; deployed when the stack takes replies).
    pub replies: RepliesConfig,
    pub timeouts: Timeouts,
    pub esm: EventSourceMapping,
    /// The send queues' visibility timeout and redrive (`maxReceiveCount`).
    pub send_visibility: Duration,
    pub send_max_receives: u32,
    pub urgent_visibility: Duration,
    pub urgent_max_receives: u32,
    /// The replies queue's visibility timeout and redrive.
    pub replies_visibility: Duration,
    pub replies_max_receives: u32,
    /// Lambda's retries of a failed status invocation (asynchronous), before the on-failure
    /// destination.
    pub status_retries: u32,
    /// The sweep's schedule.
    pub sweep_every: Duration,
    /// How long Lambda's asynchronous queue keeps a sweep's event (throttled, it is retried
    /// only this long).
    pub sweep_max_event_age: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub intake: Duration,
    pub sender: Duration,
    pub status: Duration,
    pub escalation: Duration,
    pub replies: Duration,
}

struct Template {
    root: Arc<Value>,
    parameters: HashMap<String, String>,
}

/// The template as parsed, read once per process (every seed of a long run deploys the same
/// file; parsing it was 2 % of a run's time).
fn parsed(path: &Path) -> Result<Arc<Value>, DeploymentError> {
    static PARSED: Mutex<Option<(PathBuf, Arc<Value>)>> = Mutex::new(None);
    let mut cache = PARSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((p, root)) = cache.as_ref()
        && p == path
    {
        return Ok(Arc::clone(root));
    }
    let root: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path)?).map_err(|e| err(format!("{e}")))?;
    let root = Arc::new(root);
    *cache = Some((path.to_owned(), Arc::clone(&root)));
    Ok(root)
}

fn err(m: impl Into<String>) -> DeploymentError {
    DeploymentError::Template(m.into())
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Template {
    fn load(path: &Path, overrides: &[(&str, &str)]) -> Result<Self, DeploymentError> {
        let root = parsed(path)?;
        let mut parameters = HashMap::new();
        if let Some(params) = root.get("Parameters").and_then(Value::as_mapping) {
            for (k, v) in params {
                if let (Some(k), Some(d)) = (k.as_str(), v.get("Default").and_then(scalar)) {
                    parameters.insert(k.to_owned(), d);
                }
            }
        }
        for (k, v) in overrides {
            if !parameters.contains_key(*k) {
                return Err(err(format!("no parameter {k} to override")));
            }
            parameters.insert((*k).to_owned(), (*v).to_owned());
        }
        Ok(Template { root, parameters })
    }

    fn resource(&self, id: &str) -> Result<&Value, DeploymentError> {
        self.root.get("Resources").and_then(|r| r.get(id)).ok_or_else(|| err(format!("no resource {id}")))
    }

    /// A value as the simulation needs it: literals as they are, `!Ref` to a parameter as its
    /// value, anything naming a resource as a placeholder (the simulated ports ignore names).
    fn resolve(&self, v: &Value) -> String {
        match v {
            Value::Tagged(t) => {
                let tag = t.tag.to_string();
                let tag = tag.trim_start_matches('!');
                match (tag, scalar(&t.value)) {
                    ("Ref", Some(name)) => self.parameters.get(&name).cloned().unwrap_or_else(|| format!("sim:{name}")),
                    ("Sub", Some(text)) => {
                        text.replace("${AWS::Region}", "us-east-1").replace("${AWS::AccountId}", "123456789012")
                    }
                    _ => format!("sim:{tag}"),
                }
            }
            other => scalar(other).unwrap_or_default(),
        }
    }

    /// A number of `function`'s asynchronous invocation settings (`EventInvokeConfig`).
    fn invoke_config(&self, function: &str, field: &str) -> Result<u64, DeploymentError> {
        let config = self.resource(function)?.get("Properties").and_then(|p| p.get("EventInvokeConfig"));
        self.number(config.and_then(|c| c.get(field)), &format!("{function} {field}"))
    }

    fn number(&self, v: Option<&Value>, what: &str) -> Result<u64, DeploymentError> {
        let v = v.ok_or_else(|| err(format!("{what} is not set")))?;
        self.resolve(v).parse().map_err(|_| err(format!("{what} is not a number")))
    }

    /// Globals' environment merged with the function's own (an empty value unsets).
    fn env(&self, function: &str) -> Result<HashMap<String, String>, DeploymentError> {
        let mut env = HashMap::new();
        let globals = self.root.get("Globals").and_then(|g| g.get("Function"));
        let own = self.resource(function)?.get("Properties");
        for vars in
            [globals, own].into_iter().flatten().filter_map(|s| s.get("Environment")?.get("Variables")?.as_mapping())
        {
            for (k, v) in vars {
                let Some(k) = k.as_str() else { continue };
                env.insert(k.to_owned(), self.resolve(v));
            }
        }
        Ok(env)
    }

    fn timeout(&self, function: &str) -> Result<Duration, DeploymentError> {
        let own = self.resource(function)?.get("Properties").and_then(|p| p.get("Timeout"));
        let global = self.root.get("Globals").and_then(|g| g.get("Function")).and_then(|f| f.get("Timeout"));
        Ok(Duration::from_secs(self.number(own.or(global), &format!("{function} Timeout"))?))
    }

    fn queue(&self, id: &str) -> Result<(Duration, u32), DeploymentError> {
        let p = self.resource(id)?.get("Properties").ok_or_else(|| err(format!("{id}: no Properties")))?;
        let visibility = self.number(p.get("VisibilityTimeout"), &format!("{id} VisibilityTimeout"))?;
        let receives = self
            .number(p.get("RedrivePolicy").and_then(|r| r.get("maxReceiveCount")), &format!("{id} maxReceiveCount"))?;
        Ok((Duration::from_secs(visibility), u32::try_from(receives).unwrap_or(u32::MAX)))
    }
}

impl Deployment {
    /// The stack `template.yaml` describes, with parameter `overrides`.
    pub fn from_template(path: &Path, overrides: &[(&str, &str)]) -> Result<Self, DeploymentError> {
        let t = Template::load(path, overrides)?;
        let config = |function: &'static str| -> Result<Env, DeploymentError> { Ok(Env::from_map(t.env(function)?)) };
        let wrap = |function: &'static str| move |source| DeploymentError::Config { function, source };
        let sender_fn = t.resource("SenderFunction")?;
        let mapping = sender_fn
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(|e| e.get("SendQueue"))
            .and_then(|e| e.get("Properties"))
            .ok_or_else(|| err("SenderFunction has no SendQueue event"))?;
        let esm = EventSourceMapping {
            batch_size: usize::try_from(t.number(mapping.get("BatchSize"), "BatchSize")?).unwrap_or(10),
            batching_window: Duration::from_secs(
                t.number(mapping.get("MaximumBatchingWindowInSeconds"), "MaximumBatchingWindowInSeconds")?,
            ),
            max_concurrency: usize::try_from(t.number(
                mapping.get("ScalingConfig").and_then(|s| s.get("MaximumConcurrency")),
                "MaximumConcurrency",
            )?)
            .unwrap_or(2),
        };
        let status_retries = t.invoke_config("StatusFunction", "MaximumRetryAttempts")?;
        let schedule = t
            .resource("EscalationFunction")?
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(|e| e.as_mapping())
            .and_then(|m| m.values().find_map(|ev| ev.get("Properties")?.get("ScheduleExpression")))
            .map(|v| t.resolve(v))
            .ok_or_else(|| err("EscalationFunction has no schedule"))?;
        let sweep_every = schedule
            .strip_prefix("rate(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| humantime::parse_duration(&r.replace(" minutes", "m").replace(" minute", "m")).ok())
            .ok_or_else(|| err(format!("schedule {schedule:?} is not a rate")))?;
        let sweep_max_event_age = t.invoke_config("EscalationFunction", "MaximumEventAgeInSeconds")?;
        let (send_visibility, send_max_receives) = t.queue("SendQueue")?;
        let (urgent_visibility, urgent_max_receives) = t.queue("UrgentSendQueue")?;
        let (replies_visibility, replies_max_receives) = t.queue("RepliesQueue")?;
        Ok(Deployment {
            intake: IntakeConfig::from_env(&mut config("IntakeFunction")?).map_err(wrap("intake"))?,
            sender: SenderConfig::from_env(&mut config("SenderFunction")?).map_err(wrap("sender"))?,
            status: StatusConfig::from_env(&mut config("StatusFunction")?).map_err(wrap("status"))?,
            escalation: EscalationConfig::from_env(&mut config("EscalationFunction")?).map_err(wrap("escalation"))?,
            replies: RepliesConfig::from_env(&mut config("RepliesFunction")?).map_err(wrap("replies"))?,
            timeouts: Timeouts {
                intake: t.timeout("IntakeFunction")?,
                sender: t.timeout("SenderFunction")?,
                status: t.timeout("StatusFunction")?,
                escalation: t.timeout("EscalationFunction")?,
                replies: t.timeout("RepliesFunction")?,
            },
            esm,
            send_visibility,
            send_max_receives,
            urgent_visibility,
            urgent_max_receives,
            replies_visibility,
            replies_max_receives,
            status_retries: u32::try_from(status_retries).unwrap_or(2),
            sweep_every,
            sweep_max_event_age: Duration::from_secs(sweep_max_event_age),
        })
    }

    /// `template.yaml` at the workspace root.
    pub fn workspace(overrides: &[(&str, &str)]) -> Result<Self, DeploymentError> {
        Self::from_template(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml"), overrides)
    }
}
