//! The stack's SMS breaker (issue 36): at most `SmsPartsPerHour` parts in a UTC hour, every
//! producer and recipient together. The send that would pass it opens the breaker and is not
//! published; from then on nothing is sent — each alert is withheld (suppressed) and escalated at
//! once, the next hour too — until an operator resumes, which is recorded with who and why.

use chrono::Duration;
use tocsin::domain::State;
use tocsin::domain::spend::hour_of;
use tocsin::ports::Clock;
use tocsin_tests::{Options, Pipeline, alert, key_of};

async fn submitted(p: &Pipeline, id: &str, to: &str) -> tocsin::domain::IdempotencyKey {
    let (status, body) = p.submit(&alert(id, to)).await;
    assert_eq!(status, 201, "{body}");
    key_of(&body)
}

/// A sender metric's sum over what this test emitted (SpendBreakerAlarm watches `breaker_withheld`).
fn sender_metric(name: &str) -> usize {
    tocsin_tests::emitted_metrics()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|d| d["function"] == "sender")
        .filter_map(|d| d[name].as_f64())
        .map(|n| n as usize)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_hours_ceiling_nothing_is_sent_every_alert_is_escalated_and_only_an_operator_resumes() {
    let p = Pipeline::start_with(Options {
        // Four parts an hour; each alert here is one part. Storm mode off: one SMS per alert.
        env: vec![("TOCSIN_SMS_PARTS_PER_HOUR", "4"), ("TOCSIN_STORM_MODE", "off")],
        ..Default::default()
    })
    .await;
    // Early in an hour, so that the whole first act falls in it.
    let now = p.clock.now();
    p.clock.advance(hour_of(now) + Duration::hours(1) + Duration::seconds(5) - now);

    // Five alerts to five people: four parts fit, the fifth send would pass the ceiling.
    let mut keys = Vec::new();
    for n in 0..5 {
        keys.push(submitted(&p, &format!("pump-{n}"), &format!("+1415555018{n}")).await);
    }
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 4, "the ceiling's four parts, not one more");
    let mut withheld = Vec::new();
    for key in &keys {
        let r = p.record(key).await;
        match r.status.state {
            State::Accepted => {}
            State::Suppressed => withheld.push(key.clone()),
            other => panic!("{key}: {other}"),
        }
    }
    assert_eq!(withheld.len(), 1, "exactly one alert withheld");
    let timeline = format!("{:?}", p.timeline(&withheld[0]).await);
    assert!(timeline.contains("SMS breaker is open"), "the reason is on the record: {timeline}");
    let reading = p.ledger.spend_meter().await.expect("meter");
    let open = reading.open.clone().expect("the breaker is open");
    assert_eq!((reading.parts, open.hour_parts, open.refused_parts), (4, 4, 1), "{reading:?}");
    assert_eq!((sender_metric("breaker_opened"), sender_metric("breaker_withheld")), (1, 1), "what pages on-call");

    // The next hour does not close it: pumping does not stop on the hour.
    p.clock.advance(Duration::minutes(61));
    let later = submitted(&p, "pump-next-hour", "+14155550190").await;
    p.run_sender().await;
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 4, "still nothing sent an hour later");
    assert_eq!(p.record(&later).await.status.state, State::Suppressed);

    // Each withheld alert reaches on-call at once (not at its deadline), saying why.
    p.run_escalation().await;
    let escalations = p.escalations().await;
    let escalated: Vec<_> = escalations.iter().map(|(m, _)| m.idempotency_key.clone()).collect();
    assert!(escalated.contains(&withheld[0].to_string()) && escalated.contains(&later.to_string()), "{escalated:?}");
    let withheld_pages: Vec<_> = escalations.iter().filter(|(m, _)| m.state == State::Suppressed).collect();
    assert_eq!(withheld_pages.len(), 2, "{escalations:?}");
    assert!(
        withheld_pages.iter().all(|(m, _)| m.reason.contains("NOT sent: the stack's SMS breaker is open")),
        "{withheld_pages:?}"
    );

    // An operator resumes: recorded with who and why; the hour's count starts again.
    let resumed_at = p.clock.now();
    let event = p.ledger.resume_sending("arn:aws:iam::123456789012:user/alice", "runaway loop fixed", resumed_at);
    let event = event.await.expect("resume").expect("it was open");
    assert_eq!(event.closed, open);
    assert!(
        p.ledger.resume_sending("bob", "twice", resumed_at).await.expect("resume").is_none(),
        "a closed breaker is not resumed twice"
    );
    let history = p.ledger.breaker_history().await.expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].operator.as_str(), history[0].reason.as_str()),
        ("arn:aws:iam::123456789012:user/alice", "runaway loop fixed")
    );
    let after = submitted(&p, "after-resume", "+14155550191").await;
    p.run_sender().await;
    assert_eq!(p.record(&after).await.status.state, State::Accepted, "sending resumed");
    assert_eq!(p.emulator.sent_sms().await.expect("sms").len(), 5);
}
