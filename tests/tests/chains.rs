//! Escalation chains (issue 37, docs/acknowledgement.md "Chains"), on the emulator through the
//! real sweep, sender, status and replies functions: a level nobody acknowledges within its wait
//! hands the alert to the next person — a tracked SMS of its own, sent once — and after the last
//! phone, on-call's queue; an acknowledgement at any level stops every later one.

use chrono::Duration;
use serde_json::{Value, json};
use tocsin::domain::acknowledgement::AckVia;
use tocsin::domain::chain::level_key;
use tocsin::domain::reply::AckSubject;
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{ChainLedger, LevelStart, ReplyCodes};
use tocsin_tests::{Options, Pipeline, alert, key_of};

const PRIMARY: &str = "+14155550401";
const SECONDARY: &str = "+14155550402";

fn chained(id: &str, primary: &str, secondary: &str) -> Value {
    let mut a = alert(id, primary);
    a["chain"] = json!({"wait": "5m", "then": [{"to": secondary, "wait": "5m"}]});
    a
}

fn options(replies: bool) -> Options {
    let mut o = Options::end_user_messaging();
    if replies {
        o.parameters.push(("Replies", "on"));
    }
    o.env.push(("TOCSIN_STORM_MODE", "off"));
    o
}

async fn submitted(p: &Pipeline, body: &Value) -> IdempotencyKey {
    let (status, answer) = p.submit(body).await;
    assert_eq!(status, 201, "{answer}");
    key_of(&answer)
}

/// The numbers texted so far, in order (confirmations of replies left out).
async fn texted(p: &Pipeline) -> Vec<String> {
    let texts = p.emulator.eum().sent_texts().await.expect("texts");
    texts
        .into_iter()
        .filter(|t| t.context.as_ref().is_some_and(|c| c.contains_key("tocsin-key")))
        .map(|t| t.destination)
        .collect()
}

async fn code_of(p: &Pipeline, to: &str, key: &IdempotencyKey) -> u16 {
    let held = p.inspect.held_codes(&PhoneNumber::parse(to).expect("number")).await.expect("codes");
    held.iter().find(|h| h.subject == AckSubject::Alert(key.clone())).expect("a code").code.get()
}

/// Send what is queued and read what the carrier said.
async fn deliver(p: &Pipeline) {
    p.run_sender().await;
    p.run_status().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_nobody_answers_texts_each_level_once_in_order_then_pages_on_call_once() {
    let p = Pipeline::start_with(options(false)).await;
    let root = submitted(&p, &chained("chain-1", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    assert_eq!(p.record(&root).await.status.state, State::Delivered);

    // Delivered, but nobody has it yet: within the wait nothing moves.
    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");

    p.clock.advance(Duration::minutes(3));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (1, 0), "the next level, not a page: {run:?}");
    assert!(p.escalations().await.is_empty(), "on-call is not paged for a level that moves on");
    let level = level_key(&root, 1);
    let second = p.record(&level).await;
    assert_eq!(second.intent.recipient.expose(), SECONDARY);
    assert_eq!(p.record(&root).await.status.escalation.and_then(|e| e.to_level), Some(1));

    deliver(&p).await;
    assert_eq!(texted(&p).await, vec![PRIMARY.to_owned(), SECONDARY.to_owned()], "each level once, in order");
    assert_eq!(p.record(&level).await.status.state, State::Delivered, "the level's delivery is tracked");

    p.clock.advance(Duration::minutes(6));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 1), "{run:?}");
    let paged = p.escalations().await;
    assert_eq!(paged.len(), 1, "on-call once: {paged:?}");
    assert_eq!(paged[0].0.idempotency_key, level.to_string());
    assert!(paged[0].0.reason.contains("nobody in the alert's chain acknowledged it"), "{}", paged[0].0.reason);

    // Nothing more, ever: no level again, no second page, no SMS.
    p.clock.advance(Duration::hours(2));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");
    p.run_sender().await;
    assert_eq!(texted(&p).await.len(), 2);
    assert!(p.escalations().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_at_the_first_level_stops_the_chain_before_its_next_level() {
    let p = Pipeline::start_with(options(true)).await;
    let root = submitted(&p, &chained("chain-2", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    let code = code_of(&p, PRIMARY, &root).await;
    p.person_replies(PRIMARY, &code.to_string()).await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::Acknowledged { alerts: 1 }]);

    p.clock.advance(Duration::minutes(30));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");
    p.run_sender().await;
    assert_eq!(texted(&p).await, vec![PRIMARY.to_owned()], "the second person is never texted");
    assert!(p.escalations().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_at_a_later_level_acknowledges_the_whole_chain_and_stops_on_call() {
    use tocsin_harness::eum::{Carrier, CarrierBehaviour};
    let p = Pipeline::start_with(options(true)).await;
    // The first level fails, so the chain moves on at once: the reply below arrives (SNS's real
    // clock) after the second level's SMS went out (the test clock), as it would on AWS.
    p.emulator.eum().set_carrier(PRIMARY, Carrier::new(CarrierBehaviour::Unreachable)).await.expect("carrier");
    let root = submitted(&p, &chained("chain-3", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    assert_eq!(p.run_escalation().await.chain_levels_started, 1);
    deliver(&p).await;
    let level = level_key(&root, 1);
    let code = code_of(&p, SECONDARY, &level).await;
    p.person_replies(SECONDARY, &format!("ack {code}")).await;
    assert_eq!(p.reply_outcomes().await, vec![replies::Outcome::Acknowledged { alerts: 1 }]);
    let by_root = p.record(&root).await.status.acknowledgement.expect("the chain is acknowledged at its root");
    assert_eq!((by_root.by.as_str(), by_root.via), ("+1******0402", AckVia::Reply));
    assert_eq!(p.record(&level).await.status.acknowledgement, Some(by_root.clone()));

    p.clock.advance(Duration::minutes(30));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");
    assert!(p.escalations().await.is_empty(), "on-call is not paged for an acknowledged chain");

    // Someone acknowledges the first level late: the chain is someone's already, and they learn
    // whose.
    let now = tocsin::ports::Clock::now(&p.clock);
    let late =
        tocsin::services::acknowledging::acknowledge_alert(&p.ledger, &root, "sam", AckVia::Operator, "req-2", now)
            .await
            .expect("ack");
    assert_eq!(late, tocsin::services::acknowledging::AlertAck::Before(by_root.clone()));
    assert_eq!(p.record(&root).await.status.acknowledgement, Some(by_root), "the first acknowledgement stands");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_acknowledgement_at_the_first_level_stops_the_levels_after_the_one_in_flight() {
    let p = Pipeline::start_with(options(false)).await;
    let root = submitted(&p, &chained("chain-4", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    p.clock.advance(Duration::minutes(6));
    p.run_escalation().await;
    deliver(&p).await;
    // The second person's SMS is out; now the first acknowledges (from the CLI's path).
    let now = tocsin::ports::Clock::now(&p.clock);
    tocsin::services::acknowledging::acknowledge_alert(&p.ledger, &root, "dana", AckVia::Operator, "req-1", now)
        .await
        .expect("ack");
    p.clock.advance(Duration::minutes(6));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");
    assert!(p.escalations().await.is_empty(), "the root's acknowledgement refuses the page");
    let level = p.record(&level_key(&root, 1)).await;
    assert_eq!(level.status.acknowledgement.map(|a| a.by), Some("dana".to_owned()), "the level takes it");
    assert_eq!(level.status.next_check, None, "and leaves the sweep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_that_fails_moves_on_at_once_and_an_undelivered_one_at_its_deadline() {
    use tocsin_harness::eum::{Carrier, CarrierBehaviour};
    let p = Pipeline::start_with(options(false)).await;
    p.emulator.eum().set_carrier(PRIMARY, Carrier::new(CarrierBehaviour::Unreachable)).await.expect("carrier");
    let root = submitted(&p, &chained("chain-5", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    assert_eq!(p.record(&root).await.status.state, State::Failed);
    let run = p.run_escalation().await;
    assert_eq!(run.chain_levels_started, 1, "a failed level moves on at once: {run:?}");
    deliver(&p).await;
    assert_eq!(texted(&p).await, vec![PRIMARY.to_owned(), SECONDARY.to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_request_with_another_chain_is_a_conflict_and_a_bad_chain_is_refused() {
    let p = Pipeline::start_with(options(false)).await;
    submitted(&p, &chained("chain-6", PRIMARY, SECONDARY)).await;
    let (status, body) = p.submit(&chained("chain-6", PRIMARY, "+14155550409")).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("chain"), "{body}");
    let mut bad = alert("chain-7", PRIMARY);
    bad["chain"] = json!({"wait": "5s", "then": [{"to": "nope", "wait": "5m"}]});
    let (status, body) = p.submit(&bad).await;
    assert_eq!(status, 422, "{body}");
    let fields: Vec<&str> =
        body["error"]["fields"].as_array().into_iter().flatten().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, vec!["chain.wait", "chain.then[0].to"], "{body}");
}

/// A run that started the next level and died before marking this one (its carrier degraded:
/// moved on early) is finished by the next run, which tells the reason the level started for —
/// kept on the root — not its own ("not acknowledged within 5m"), so the chain's story is true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_a_dead_run_started_is_finished_by_the_next_run_with_the_reason_it_started_for() {
    let p = Pipeline::start_with(options(false)).await;
    let root = submitted(&p, &chained("chain-reason", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    let why = "carrier Simulated Carrier (310-001) degraded: moved on before the wait ended";
    let started = p.ledger.start_level(&root, 1, p.clock.now_utc(), why).await.expect("the start");
    assert_eq!(started, LevelStart::Started, "the run that died got this far");

    p.clock.advance(Duration::minutes(6));
    p.run_escalation().await;
    let reason = p.record(&root).await.status.escalation.expect("the level marked").reason;
    assert!(reason.starts_with(why), "told as it started: {reason}");
    assert_eq!(p.record(&level_key(&root, 1)).await.intent.recipient.expose(), SECONDARY, "the level written");
    deliver(&p).await;
    assert_eq!(texted(&p).await, vec![PRIMARY.to_owned(), SECONDARY.to_owned()], "each level once");
}
