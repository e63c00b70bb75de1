//! Logs and metrics. Logs are JSON lines through `tracing`; metrics are CloudWatch Embedded
//! Metric Format (EMF) lines on stdout, which Lambda's log pipeline turns into metrics without an
//! API call. Nothing here ever receives a phone number or a message body in clear: callers pass
//! masked values (the domain types mask themselves).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

use serde_json::{Value, json};

pub const NAMESPACE: &str = "tocsin";

/// JSON logs for Lambda, level from `RUST_LOG` (default `info`).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .without_time()
        .try_init();
}

type Sink = Box<dyn Write + Send>;

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Sends EMF lines somewhere other than stdout (the default, which Lambda turns into metrics):
/// the local demo writes them to a file, the log-hygiene test captures them.
pub fn set_metrics_sink(sink: Sink) {
    if let Ok(mut s) = SINK.lock() {
        *s = Some(sink);
    }
}

fn write_line(line: &str) {
    match SINK.lock() {
        Ok(mut guard) => match guard.as_mut() {
            Some(sink) => {
                let _ = writeln!(sink, "{line}");
            }
            None => {
                let _ = writeln!(std::io::stdout().lock(), "{line}");
            }
        },
        Err(_) => {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Count,
    Milliseconds,
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::None => "None",
        }
    }
}

/// One EMF document: a set of dimensions and the values measured under them.
#[derive(Debug, Clone)]
pub struct Metrics {
    function: &'static str,
    dimensions: BTreeMap<&'static str, String>,
    values: BTreeMap<&'static str, (Vec<f64>, Unit)>,
}

impl Metrics {
    pub fn new(function: &'static str) -> Self {
        Metrics { function, dimensions: BTreeMap::new(), values: BTreeMap::new() }
    }

    pub fn dimension(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.dimensions.insert(name, value.into());
        self
    }

    pub fn add(&mut self, name: &'static str, value: f64, unit: Unit) {
        self.values.entry(name).or_insert_with(|| (Vec::new(), unit)).0.push(value);
    }

    pub fn count(&mut self, name: &'static str, n: u64) {
        self.add(name, n as f64, Unit::Count);
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The EMF JSON document.
    pub fn to_emf(&self, timestamp_ms: i64) -> Value {
        let mut dims: Vec<&str> = vec!["function"];
        dims.extend(self.dimensions.keys().copied());
        let mut doc = json!({
            "_aws": {
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [dims],
                    "Metrics": self.values.iter().map(|(n, (_, u))| json!({"Name": n, "Unit": u.as_str()})).collect::<Vec<_>>(),
                }]
            },
            "function": self.function,
        });
        if let Some(obj) = doc.as_object_mut() {
            for (k, v) in &self.dimensions {
                obj.insert((*k).to_owned(), json!(v));
            }
            for (n, (vals, _)) in &self.values {
                let v = if vals.len() == 1 { json!(vals[0]) } else { json!(vals) };
                obj.insert((*n).to_owned(), v);
            }
        }
        doc
    }

    /// Writes the document as one stdout line (where Lambda's EMF extraction reads it).
    pub fn flush(&mut self) {
        if self.values.is_empty() {
            return;
        }
        let line = self.to_emf(chrono::Utc::now().timestamp_millis()).to_string();
        write_line(&line);
        self.values.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_documents_declare_every_metric_and_dimension() {
        let mut m = Metrics::new("status").dimension("carrier", "Acme").dimension("country", "US");
        m.count("delivered", 1);
        m.add("dwell_ms", 599.0, Unit::Milliseconds);
        m.add("dwell_ms", 700.0, Unit::Milliseconds);
        let d = m.to_emf(1);
        assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0], json!(["function", "carrier", "country"]));
        assert_eq!(d["carrier"], "Acme");
        assert_eq!(d["delivered"], 1.0);
        assert_eq!(d["dwell_ms"], json!([599.0, 700.0]));
        assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().map(Vec::len), Some(2));
    }
}
