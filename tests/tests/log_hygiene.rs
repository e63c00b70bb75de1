//! No phone number and no message body in clear, in any log line or metric the functions write.
//! Captures everything the end-to-end paths log (the same JSON subscriber as in Lambda) and every
//! EMF line, across successes, failures, suppression, unknown outcomes, reconciliation, orphans,
//! rejected input and escalations — then looks for the numbers and texts that went through.

use std::io::Write;
use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde_json::json;
use tocsin_harness::events::sns_delivery_record;
use tocsin_harness::fault_proxy::{Fault, FaultProxy, Rule};
use tocsin_tests::{Pipeline, alert, key_of};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().map(|b| b.clone()).unwrap_or_default()).into_owned()
    }
}

/// The scenario runs every function's paths, two pipelines, in one future: on a thread with the
/// stack Lambda gives a handler (its main thread's 8 MiB), not a test thread's 2 MiB.
#[test]
fn no_phone_number_or_message_body_appears_in_clear_in_any_log_line_or_metric() {
    let scenario = std::thread::Builder::new()
        .name("log-hygiene".into())
        .stack_size(8 << 20)
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(every_path_logs_nothing_in_clear())
        })
        .expect("a thread");
    if let Err(panic) = scenario.join() {
        std::panic::resume_unwind(panic);
    }
}

async fn every_path_logs_nothing_in_clear() {
    let logs = Capture::default();
    let sink = logs.clone();
    // The functions' own log layer, at the console's DEBUG level (every debug line of tocsin's code).
    let level = tocsin::telemetry::log_directive(None, Some("DEBUG")).expect("a level");
    tracing_subscriber::registry()
        .with(tocsin::telemetry::json_logs(&level, move || sink.clone()))
        .try_init()
        .expect("the only subscriber in this test binary");
    let p = Pipeline::start().await;
    let metrics = Capture::default();
    tocsin::telemetry::set_metrics_sink(Box::new(metrics.clone()));

    let numbers = ["+14155550191", "+14155550192", "+14155550193", "+14155550194", "+14155550195"];
    let proxy = FaultProxy::start(&p.emulator.endpoint(), 4).await.expect("proxy");
    let p = p.with_sns_endpoint(&proxy.endpoint()).await;
    let mut keys = Vec::new();
    for (i, n) in numbers.iter().enumerate() {
        let mut req = alert(&format!("hygiene-{i}"), n);
        req["variables"]["host"] = json!(format!("secret-host-{i}"));
        let (_, body) = p.submit(&req).await;
        keys.push(key_of(&body));
    }
    // Bad input naming a number, a rejected EventBridge event, a conflict.
    p.submit(&json!({"event_id": "bad", "template": {"name": "disk_full", "version": 1}, "recipient": "+1415555019"}))
        .await;
    let mut conflict = alert("hygiene-0", "+14155550196");
    conflict["variables"]["host"] = json!("secret-host-conflict");
    p.submit(&conflict).await;
    let mut eb: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            tocsin_harness::workspace_root().join("events/intake/eventbridge-alert-requested.json"),
        )
        .expect("event"),
    )
    .expect("json");
    eb["detail"]["recipient"] = json!("14155550197");
    p.intake.handle(eb).await.expect("handled");

    // One publish answer lost (unknown), one throttled then sent.
    proxy.add_rule(Rule::once("SNS.Publish", Fault::DropResponse));
    p.run_sender().await;
    proxy.add_rule(Rule::once("SNS.Publish", Fault::sns_throttling()));
    p.make_send_queue_visible().await;
    p.run_sender().await;

    let sent = p.emulator.sent_sms().await.expect("sms");
    let id_of = |n: &str| sent.iter().find(|m| m.phone_number == n).map(|m| m.message_id.clone());
    // Delivered, opted out (suppression), conflicting, an orphan, and the unknown one searched for.
    let now = p.clock.now_utc();
    for (n, ok, resp) in [
        (numbers[1], true, "Message has been accepted by phone carrier"),
        (numbers[2], false, "Phone number is opted out"),
        (numbers[3], true, "Message has been accepted by phone carrier"),
        (numbers[3], false, "Unknown error attempting to reach phone"),
    ] {
        if let Some(id) = id_of(n) {
            let group = if ok { "SmsSuccessLogGroup" } else { "SmsFailureLogGroup" };
            p.put_log(p.stack.log_group(group), &sns_delivery_record(&id, n, ok, resp, now)).await;
        }
    }
    p.put_log(
        p.stack.log_group("SmsSuccessLogGroup"),
        &sns_delivery_record("nobody-knows", "+14155550198", true, "ok", now),
    )
    .await;
    if let Some(id) = id_of(numbers[0]) {
        p.put_log(p.stack.log_group("SmsSuccessLogGroup"), &sns_delivery_record(&id, numbers[0], true, "ok", now))
            .await;
    }
    p.run_status().await;
    p.run_escalation().await;
    p.submit(&alert("hygiene-suppressed", numbers[2])).await;
    p.run_sender().await;
    p.clock.advance(Duration::minutes(16));
    p.run_escalation().await;
    p.escalations().await;

    // Boxed: the test's future is deep already.
    let (texted, stranger) = ("+14155550181", "+14155550189");
    Box::pin(replies_scenario(texted, stranger)).await;

    let logs = logs.text();
    let metrics = metrics.text();
    assert!(logs.lines().count() >= 20, "the scenario logged ({} lines)", logs.lines().count());
    assert!(logs.contains("+1******0192"), "numbers appear masked");
    assert!(logs.contains("kept as orphan"), "debug lines were captured too");
    assert!(!metrics.is_empty());
    let all = format!("{logs}\n{metrics}");
    assert!(logs.contains("reply handled"), "the replies function's lines were captured");
    for n in numbers.iter().chain(&["+14155550196", "+14155550197", "+14155550198", "+1415555019", texted, stranger]) {
        assert!(!all.contains(n), "{n} in clear");
        assert!(!all.contains(&n[1..]), "{} (without +) in clear", &n[1..]);
    }
    for secret in
        ["secret-host", "volume /var", "ALERT:", "secret-reply-words", "secret-stranger-words", "secret-not-json"]
    {
        assert!(!all.contains(secret), "message text {secret:?} in a log line");
    }
}

/// Replies (End User Messaging, Replies=on): codes, acknowledgements, a confirmation, a reply not
/// understood with words of its own, a stranger, STOP, a record that is not a reply.
async fn replies_scenario(texted: &str, stranger: &str) {
    let mut o = tocsin_tests::Options::end_user_messaging();
    o.parameters.push(("Replies", "on"));
    let r = Box::pin(Pipeline::start_with(o)).await;
    for i in 0..2 {
        let mut req = alert(&format!("hygiene-reply-{i}"), texted);
        req["variables"]["host"] = json!(format!("secret-host-reply-{i}"));
        r.submit(&req).await;
    }
    Box::pin(r.run_sender()).await;
    for text in ["1", "secret-reply-words", "ack all", "STOP"] {
        r.person_replies(texted, text).await;
    }
    r.person_replies(stranger, "secret-stranger-words").await;
    let replies_queue = r.stack.queue("RepliesQueue").url.clone();
    r.sqs.send_message().queue_url(&replies_queue).message_body("secret-not-json").send().await.expect("send");
    Box::pin(r.run_replies()).await;
}
