//! Acknowledgement (issue 37): once someone has an alert it is never escalated after, and of two
//! acknowledgements at once exactly one is recorded. On the emulator, through the real sweep.

use chrono::Duration;
use tocsin::domain::IdempotencyKey;
use tocsin::domain::acknowledgement::AckVia;
use tocsin::domain::observation::ObservationKind;
use tocsin::ports::Clock;
use tocsin::services::acknowledging::{AlertAck, acknowledge_alert};
use tocsin_tests::{Pipeline, alert, key_of};

async fn accepted(p: &Pipeline, id: &str, to: &str) -> IdempotencyKey {
    let (status, body) = p.submit(&alert(id, to)).await;
    assert_eq!(status, 201, "{body}");
    key_of(&body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_alert_is_never_escalated_and_an_unanswered_one_beside_it_is() {
    let p = Pipeline::start().await;
    let answered = accepted(&p, "ack-1", "+14155550181").await;
    let unanswered = accepted(&p, "ack-2", "+14155550182").await;
    p.run_sender().await;
    // No delivery record comes for either; someone has the first.
    let now = p.clock.now();
    let got = acknowledge_alert(&p.ledger, &answered, "dana", AckVia::Operator, "req-1", now).await.expect("ack");
    assert!(matches!(got, AlertAck::Now(ref a) if a.by == "dana" && a.via == AckVia::Operator), "{got:?}");
    let r = p.record(&answered).await;
    assert_eq!(r.status.state, tocsin::domain::State::Accepted, "an acknowledgement leaves the state as it was");
    assert_eq!(
        r.status.acknowledgement,
        Some(match got {
            AlertAck::Now(a) | AlertAck::Before(a) => a,
        })
    );

    p.clock.advance(Duration::minutes(16));
    let run = p.run_escalation().await;
    let paged: Vec<String> = p.escalations().await.into_iter().map(|(m, _)| m.idempotency_key).collect();
    assert_eq!(paged, vec![unanswered.to_string()], "only the unanswered alert is paged ({run:?})");
    let r = p.record(&answered).await;
    assert!(r.status.escalation.is_none(), "the acknowledged alert was escalated: {:?}", r.status.escalation);
    assert!(
        p.timeline(&answered)
            .await
            .iter()
            .any(|o| matches!(&o.kind, ObservationKind::Acknowledged { by, via: AckVia::Operator } if by == "dana")),
        "the timeline says who acknowledged it"
    );
    p.clock.advance(Duration::hours(2));
    p.run_escalation().await;
    assert!(p.escalations().await.is_empty(), "nor is it escalated later");
    assert!(p.record(&answered).await.status.escalation.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_acknowledgements_at_once_exactly_one_is_recorded_and_a_retry_finds_its_own() {
    let p = Pipeline::start().await;
    let key = accepted(&p, "ack-race", "+14155550183").await;
    let now = p.clock.now();
    let (a, b) = tokio::join!(
        acknowledge_alert(&p.ledger, &key, "+1******0183", AckVia::Reply, "inbound-1", now),
        acknowledge_alert(&p.ledger, &key, "sam", AckVia::Operator, "req-9", now),
    );
    let (a, b) = (a.expect("reply"), b.expect("operator"));
    let recorded = p.record(&key).await.status.acknowledgement.expect("acknowledged");
    let nows = [&a, &b].iter().filter(|x| matches!(x, AlertAck::Now(_))).count();
    assert_eq!(nows, 1, "exactly one is recorded: {a:?} {b:?}");
    for x in [&a, &b] {
        let (AlertAck::Now(ack) | AlertAck::Before(ack)) = x;
        assert_eq!(ack, &recorded, "both learn whose acknowledgement stands");
    }
    let acks =
        p.timeline(&key).await.into_iter().filter(|o| matches!(o.kind, ObservationKind::Acknowledged { .. })).count();
    assert_eq!(acks, 1, "one acknowledgement in the timeline");
    let again =
        acknowledge_alert(&p.ledger, &key, "+1******0183", AckVia::Reply, "inbound-1", now).await.expect("retry");
    assert_eq!(again, AlertAck::Before(recorded));
}
