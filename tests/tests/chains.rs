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
use tocsin::ports::{ChainLedger, IntentStore, LevelStart, ReplyCodes};
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

/// A template's chain (`tocsin chains set`), as the CLI writes it through the adapter.
async fn set_policy(p: &Pipeline, chain: Value, at: chrono::DateTime<chrono::Utc>) {
    let policy = tocsin::domain::chain_policy::ChainPolicy::parse(
        "disk_full",
        &chain,
        at,
        tocsin::domain::template::Catalog::builtin(),
    )
    .expect("a valid policy");
    p.registry.set_chain_policy(&policy, "alice", "payments rota").await.expect("set");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_whose_request_names_no_chain_walks_its_templates_chain_and_keeps_it_when_the_policy_changes() {
    let p = Pipeline::start_with(options(false)).await;
    // Two chains' SMS within a second, twice: the stack's rate, not a toll-free number's 3 parts
    // per second.
    let number = p.origination.as_ref().expect("an origination number");
    p.emulator.eum().set_parts_per_second(&number.id, 20).await.expect("rate");
    let set_at = chrono::Utc::now();
    set_policy(&p, json!({"wait": "5m", "then": [{"to": SECONDARY, "wait": "5m"}]}), set_at).await;

    let root = submitted(&p, &alert("policy-1", PRIMARY)).await;
    let chain = p.record(&root).await.intent.chain.expect("the template's chain");
    let levels: Vec<&str> = chain.levels.iter().map(|l| l.to.expose()).collect();
    assert_eq!(levels, [PRIMARY, SECONDARY], "laid out for the alert's own recipient");
    assert_eq!(chain.policy.as_ref().map(|p| p.template.as_str()), Some("disk_full"));

    // A request's own chain wins over its template's.
    let own = submitted(&p, &chained("policy-own", "+14155550403", "+14155550404")).await;
    let own_chain = p.record(&own).await.intent.chain.expect("its own chain");
    assert_eq!(own_chain.levels[1].to.expose(), "+14155550404");
    assert_eq!(own_chain.policy, None);

    // The policy walks like a request's chain: the next person once, then one page.
    deliver(&p).await;
    p.clock.advance(Duration::minutes(6));
    assert_eq!(p.run_escalation().await.chain_levels_started, 2, "both chains moved on");
    deliver(&p).await;
    let texts = texted(&p).await;
    assert_eq!(texts.iter().filter(|t| *t == SECONDARY).count(), 1, "{texts:?}");
    assert_eq!(p.record(&level_key(&root, 1)).await.status.state, State::Delivered);

    // The policy changes: the alert keeps the chain it was accepted with, a replay of its request
    // is a replay (not a conflict with the new policy), and a new alert takes the new chain.
    set_policy(&p, json!({"wait": "10m"}), set_at + Duration::seconds(1)).await;
    p.clock.advance(Duration::seconds(61));
    let (status, answer) = p.submit(&alert("policy-1", PRIMARY)).await;
    assert_eq!(status, 200, "a faithful replay: {answer}");
    assert_eq!(p.record(&root).await.intent.chain.map(|c| c.levels.len()), Some(2));
    let later = submitted(&p, &alert("policy-2", PRIMARY)).await;
    let later_chain = p.record(&later).await.intent.chain.expect("the new chain");
    assert_eq!((later_chain.levels.len(), later_chain.levels[0].wait_s), (1, 600));

    // Removed: within a minute the template's alerts get the default chain again.
    let removed_at = set_at + Duration::seconds(2);
    assert!(p.registry.remove_chain_policy("disk_full", "bob", "rota ended", removed_at).await.expect("rm"));
    p.clock.advance(Duration::seconds(61));
    let plain = submitted(&p, &alert("policy-3", PRIMARY)).await;
    assert_eq!(p.record(&plain).await.intent.chain, None);
    let history = p.registry.chain_policy_history().await.expect("history");
    let who: Vec<(&str, &str)> = history.iter().map(|e| (e.operator.as_str(), e.reason.as_str())).collect();
    assert_eq!(who, [("alice", "payments rota"), ("alice", "payments rota"), ("bob", "rota ended")]);
}

/// A level whose sender claimed it and vanished takes the chain's acknowledgement and is never
/// escalated, but is still swept until its lease lapses: its SMS's fate becomes an explicit
/// unknown, not `sending` for ever. (Found by the simulator's long mode, End User Messaging seed
/// 126138 at 330 alerts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_in_flight_when_the_chain_is_acknowledged_still_becomes_an_explicit_unknown_when_its_lease_lapses() {
    let p = Pipeline::start_with(options(false)).await;
    let root = submitted(&p, &chained("chain-8", PRIMARY, SECONDARY)).await;
    deliver(&p).await;
    p.clock.advance(Duration::minutes(6));
    assert_eq!(p.run_escalation().await.chain_levels_started, 1);
    // Level 1's sender claims it and vanishes before it records anything.
    let level = level_key(&root, 1);
    let now = tocsin::ports::Clock::now(&p.clock);
    p.ledger.claim(&level, "vanished-attempt", now, now + Duration::minutes(10)).await.expect("claim");
    tocsin::services::acknowledging::acknowledge_alert(&p.ledger, &root, "dana", AckVia::Operator, "req-8", now)
        .await
        .expect("ack");

    // Its wait ends while the lease holds: it takes the chain's acknowledgement.
    p.clock.advance(Duration::minutes(6));
    let run = p.run_escalation().await;
    assert_eq!((run.chain_levels_started, run.escalated), (0, 0), "{run:?}");
    let taken = p.record(&level).await;
    assert_eq!(taken.status.acknowledgement.map(|a| a.by), Some("dana".to_owned()));
    assert_eq!((taken.status.state, taken.status.next_check), (State::Sending, taken.status.lease_until));

    p.clock.advance(Duration::minutes(5));
    let run = p.run_escalation().await;
    assert_eq!((run.lease_expired_unknown, run.escalated), (1, 0), "{run:?}");
    assert_eq!(p.record(&level).await.status.state, State::SendUnknown, "an explicit unknown");
    assert!(p.escalations().await.is_empty(), "acknowledged: never paged");
}
