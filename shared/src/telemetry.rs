//! Logs and metrics. Logs are JSON lines through `tracing`; metrics are CloudWatch Embedded
//! Metric Format (EMF) lines on stdout, which Lambda's log pipeline turns into metrics without an
//! API call. Nothing here ever receives a phone number or a message body in clear: callers pass
//! masked values (the domain types mask themselves).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

use serde_json::{Map, Value, json};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{self, FilterExt};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

pub const NAMESPACE: &str = "tocsin";

/// The span `lambda_runtime::run` opens around every invocation, with the `requestId` field.
pub const INVOKE_SPAN: &str = "Lambda runtime invoke";

/// tocsin's own crates (and the runtime's): the ones `AWS_LAMBDA_LOG_LEVEL=DEBUG|TRACE` opens up.
/// Dependencies (AWS SDK, HTTP, TLS) stay at `info` then; `RUST_LOG` reaches them when needed.
const OWN_TARGETS: &[&str] =
    &["tocsin", "intake", "sender", "status", "escalation", "sms_preferences", "lambda_runtime"];

/// JSON logs for Lambda, one object per line: `level`, `message`, the event's fields, and the
/// invocation's `requestId` (and `xrayTraceId`) from the span the runtime opens per invocation,
/// so every line can be matched to Lambda's START/END/REPORT lines. The level comes from
/// [`log_directive`]. An unusable level setting does not stop the function: it logs at `info` and
/// says so in a warning line.
pub fn init() {
    let rust_log = std::env::var("RUST_LOG").ok();
    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let (directive, problem) = match log_directive(rust_log.as_deref(), lambda_level.as_deref()) {
        Ok(d) => (d, None),
        Err(p) => ("info".to_owned(), Some(p)),
    };
    let _ = tracing_subscriber::registry().with(json_logs(&directive, std::io::stdout)).try_init();
    if let Some(p) = problem {
        tracing::warn!("{p}; logging at info");
    }
}

/// The log layer [`init`] installs, writing to `writer` at `directive` (an `info` filter if the
/// directive is unusable; [`log_directive`] checks it first).
pub fn json_logs<S, W>(directive: &str, writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(directive).unwrap_or_else(|_| EnvFilter::new("info"));
    // The invocation span is always recorded (it carries the request id), whatever the level.
    let invoke_span = filter::filter_fn(|m| m.is_span() && m.name() == INVOKE_SPAN);
    tracing_subscriber::fmt::layer()
        .fmt_fields(JsonFields::new())
        .event_format(LambdaJson)
        .with_writer(writer)
        .with_filter(filter.or(invoke_span))
}

/// The log filter, in this order: `RUST_LOG` when set (any `tracing` filter directive), else
/// `AWS_LAMBDA_LOG_LEVEL` (the console's "application log level": TRACE, DEBUG, INFO, WARN,
/// ERROR, FATAL — `tracing` has no FATAL, so it means ERROR; TRACE and DEBUG apply to tocsin's own
/// crates and the runtime, dependencies stay at INFO), else `info`. An unusable value is an
/// error naming it.
pub fn log_directive(rust_log: Option<&str>, lambda_level: Option<&str>) -> Result<String, String> {
    let set = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    if let Some(d) = set(rust_log) {
        return match EnvFilter::try_new(&d) {
            Ok(_) => Ok(d),
            Err(e) => Err(format!("RUST_LOG={d:?} is not a log filter: {e}")),
        };
    }
    let Some(level) = set(lambda_level) else {
        return Ok("info".to_owned());
    };
    let own = |l: &str| {
        let mut d = "info".to_owned();
        for t in OWN_TARGETS {
            d.push_str(&format!(",{t}={l}"));
        }
        d
    };
    match level.to_ascii_uppercase().as_str() {
        "TRACE" => Ok(own("trace")),
        "DEBUG" => Ok(own("debug")),
        "INFO" => Ok("info".to_owned()),
        "WARN" => Ok("warn".to_owned()),
        "ERROR" | "FATAL" => Ok("error".to_owned()),
        _ => Err(format!("AWS_LAMBDA_LOG_LEVEL={level:?} is not one of TRACE, DEBUG, INFO, WARN, ERROR, FATAL")),
    }
}

/// One JSON object per event: level, the invocation's ids, the spans' fields, the event's fields.
struct LambdaJson;

impl<S> FormatEvent<S, JsonFields> for LambdaJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = Map::new();
        line.insert("level".into(), json!(event.metadata().level().as_str()));
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                // The fmt layer keeps each span's fields, formatted as a JSON object.
                if let Some(fields) = ext.get::<FormattedFields<JsonFields>>()
                    && let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&fields.fields)
                {
                    line.extend(map);
                }
            }
        }
        event.record(&mut FieldsInto(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}

struct FieldsInto<'a>(&'a mut Map<String, Value>);

impl Visit for FieldsInto<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), json!(format!("{value:?}")));
    }
}

type Sink = Box<dyn Write + Send>;

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Set when metrics go nowhere ([`discard_metrics`]): documents are not even built.
static DISCARD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Drops every EMF line from now on, without building it: for runs whose metrics nobody reads
/// (the simulation drives the handlers millions of times; the world is its record).
pub fn discard_metrics() {
    DISCARD.store(true, std::sync::atomic::Ordering::Relaxed);
}

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
    Seconds,
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Seconds => "Seconds",
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
        if DISCARD.load(std::sync::atomic::Ordering::Relaxed) {
            self.values.clear();
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
    fn rust_log_comes_first_then_the_consoles_log_level_then_info() {
        assert_eq!(log_directive(Some("warn,tocsin=debug"), Some("ERROR")).as_deref(), Ok("warn,tocsin=debug"));
        assert_eq!(log_directive(None, Some("ERROR")).as_deref(), Ok("error"));
        assert_eq!(log_directive(Some("  "), Some("WARN")).as_deref(), Ok("warn"), "an empty RUST_LOG is unset");
        assert_eq!(log_directive(None, None).as_deref(), Ok("info"));
        assert_eq!(log_directive(None, Some("")).as_deref(), Ok("info"));
    }

    #[test]
    fn every_console_log_level_maps_to_a_tracing_filter() {
        let own_at = |l: &str| {
            format!(
                "info,tocsin={l},intake={l},sender={l},status={l},escalation={l},sms_preferences={l},lambda_runtime={l}"
            )
        };
        for (console, expected) in [
            ("TRACE", own_at("trace")),
            ("DEBUG", own_at("debug")),
            ("INFO", "info".to_owned()),
            ("WARN", "warn".to_owned()),
            ("ERROR", "error".to_owned()),
            ("FATAL", "error".to_owned()),
            ("warn", "warn".to_owned()),
        ] {
            assert_eq!(log_directive(None, Some(console)), Ok(expected.clone()), "{console}");
            assert!(EnvFilter::try_new(&expected).is_ok(), "{expected}");
        }
    }

    #[test]
    fn an_unusable_level_setting_is_named() {
        let err = log_directive(None, Some("VERBOSE")).expect_err("not a level");
        assert!(err.contains("AWS_LAMBDA_LOG_LEVEL=\"VERBOSE\""), "{err}");
        let err = log_directive(Some("tocsin=loud"), None).expect_err("not a directive");
        assert!(err.contains("RUST_LOG=\"tocsin=loud\""), "{err}");
    }

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
