//! Port contracts: the simulation's in-memory ports and the AWS adapters, on the emulator, give
//! the same answers to the same calls — so the world the simulation explores is the adapters'
//! world. Each contract is one script of port calls, generic over the ports, whose every answer
//! is written down; the two transcripts must be equal line for line. A behaviour one side has and
//! the other lacks shows as the first differing line.
//!
//! Where the emulator is kinder than AWS (it never lags, throttles or loses an answer), the fault
//! contracts inject the same fault on both sides: through the fault proxy in front of the
//! emulator, and as a forced verdict in the simulation.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, TimeZone, Utc};
use tocsin::domain::carrier::{CarrierHold, CarrierSeen};
use tocsin::domain::carrier_traffic::{self, CountryTallies, Tally, TrafficPolicy, minute_of};
use tocsin::domain::intent::{Escalation, IntentRecord, Status};
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::producer::{ProducerName, ProducerRate};
use tocsin::domain::reply::{AckSubject, ReplyCode};
use tocsin::domain::request::{Limits, validate};
use tocsin::domain::spend::{Spend, SpendCeiling};
use tocsin::domain::state::ReceiptEffect;
use tocsin::domain::storm::{DigestId, Lane};
use tocsin::domain::template::Catalog;
use tocsin::domain::{IdempotencyKey, Intent, Origin, PhoneNumber, State};
use tocsin::ports::carriers::{CarrierBook, CarrierHolds, CarrierTraffic, RecentSends};
use tocsin::ports::{
    Backlog, ChainLedger, ChainPolicySource, ClaimOutcome, Commit, DigestRecord, DigestStore, DueIndex,
    EscalationBacklog, EscalationQuota, Expect, IntentStore, LevelStart, LoggedRecord, MessageIndex, NextCheck,
    OrphanRecord, PortResult, ProducerQuota, RecipientRegistry, RecipientRoster, ReplyCodes, ReplyConfirmations,
    SendBudget, SendLog, SendQueue, SpendMeter, StatusPatch, SuppressionEvidence, Transition, TransitionOutcome,
    UrgentLane,
};
use tocsin_sim::exec::{Fault, Sim, Verdict, to_ms};
use tocsin_sim::world::ledger::SimLedger;
use tocsin_sim::world::registry::SimRegistry;
use tocsin_sim::world::sms::Sms;
use tocsin_sim::world::sqs::SimSqs;
use tocsin_sim::world::{FaultPlan, World};

/// Every ledger port the functions use.
trait Ledger:
    IntentStore
    + MessageIndex
    + DueIndex
    + Backlog
    + SendBudget
    + DigestStore
    + EscalationBacklog
    + RecentSends
    + ProducerQuota
    + SpendMeter
    + EscalationQuota
{
}
impl<T> Ledger for T where
    T: IntentStore
        + MessageIndex
        + DueIndex
        + Backlog
        + SendBudget
        + DigestStore
        + EscalationBacklog
        + RecentSends
        + ProducerQuota
        + SpendMeter
        + EscalationQuota
{
}

/// A fixed instant, to the millisecond (what DynamoDB keeps), near the present (so nothing the
/// emulator stores looks expired).
fn base() -> DateTime<Utc> {
    let now = Utc::now().timestamp_millis();
    Utc.timestamp_millis_opt(now - now % 1000).single().expect("an instant")
}

fn intent(n: usize, to: &str, base: DateTime<Utc>, deadline_min: i64) -> IntentRecord {
    let body = serde_json::json!({
        "event_id": format!("contract:{n}"),
        "template": {"name": "payment_failed", "version": 1},
        "variables": {"run_id": format!("c{n}"), "stage": "settle"},
        "recipient": to,
        "deadline": format!("{deadline_min}m"),
    });
    let limits = Limits {
        default_deadline: std::time::Duration::from_secs(900),
        min_deadline: std::time::Duration::from_secs(60),
        max_deadline: std::time::Duration::from_secs(72 * 3600),
        max_segments: 3,
        reply_prompt: false,
        sms: Default::default(),
    };
    let req = validate(&body, Catalog::builtin(), &limits, base).expect("a valid request");
    IntentRecord {
        intent: Intent::from_request(
            req,
            Origin::Api,
            tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
            base,
        ),
        status: Status::new(),
    }
}

fn obs(id: &str, at: DateTime<Utc>, kind: ObservationKind, state: Option<State>) -> Observation {
    let o = Observation::new(id, at, kind);
    match state {
        Some(s) => o.with_state(s),
        None => o,
    }
}

fn transition(
    key: &IdempotencyKey,
    from: Vec<State>,
    patch: StatusPatch,
    o: Observation,
    commit: Commit,
) -> Transition {
    Transition {
        key: key.clone(),
        from,
        attempt_id: None,
        patch,
        observation: o,
        next_check: NextCheck::Keep,
        index_message: None,
        expect: Expect::default(),
        retain_until: None,
        commit,
        carried_along: Vec::new(),
    }
}

/// A transcript line: what a call answered, with what varies by store (shards) left out.
fn line(call: &str, answer: impl std::fmt::Debug) -> String {
    format!("{call} => {answer:?}")
}

/// The ledger contract: a script over every ledger port, its answers written down.
async fn ledger_contract<L: Ledger>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    let mut out = Vec::new();
    let to_a = PhoneNumber::parse("+12065550101").expect("number");
    let to_b = PhoneNumber::parse("+12065550102").expect("number");
    let records: Vec<IntentRecord> =
        (0..6).map(|n| intent(n, if n % 2 == 0 { to_a.expose() } else { to_b.expose() }, t0, 10 + n as i64)).collect();
    let key = |n: usize| records[n].intent.key.clone();
    let m = |s: i64| t0 + Duration::seconds(s);

    // Intents: conditional put, replay, read.
    for (n, r) in records.iter().enumerate() {
        out.push(line(
            &format!("put_new {n}"),
            l.put_new(r, m(120)).await.map(|o| matches!(o, tocsin::ports::PutOutcome::Created)),
        ));
    }
    out.push(line(
        "put_new 0 again",
        l.put_new(&records[0], m(120)).await.map(|o| match o {
            tocsin::ports::PutOutcome::Exists(r) => format!("exists {:?}", r.status),
            tocsin::ports::PutOutcome::Created => "created".into(),
        }),
    ));
    out.push(line("get 0", l.get(&key(0)).await));
    let missing = IdempotencyKey::derive(
        &tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
        "contract:missing",
        &records[0].intent.template,
    );
    out.push(line("get missing", l.get(&missing).await));

    // Claims.
    out.push(line("claim 0 a1", l.claim(&key(0), "a1", m(1), m(121)).await));
    out.push(line("claim 0 a2", l.claim(&key(0), "a2", m(2), m(122)).await));
    out.push(line("claim 0 a1 again (its lost answer, retried)", l.claim(&key(0), "a1", m(3), m(123)).await));
    out.push(line(
        "claim missing",
        l.claim(&missing, "a3", m(3), m(123)).await.map(|o| matches!(o, ClaimOutcome::Missing)),
    ));
    out.push(line("claim 1 b1", l.claim(&key(1), "b1", m(4), m(124)).await));

    // The sender's outcome, facts first: observation and message index, then the state.
    let mut accepted = transition(
        &key(0),
        vec![State::Sending],
        StatusPatch {
            state: Some(State::Accepted),
            clear_claim: true,
            increment_attempts: true,
            sns_message_id: Some("msg-0".into()),
            accepted_at: Some(m(5)),
            ..Default::default()
        },
        obs(
            "attempt:a1:accepted",
            m(5),
            ObservationKind::Accepted { attempt_id: "a1".into(), sns_message_id: "msg-0".into() },
            Some(State::Accepted),
        ),
        Commit::FactsFirst,
    );
    accepted.attempt_id = Some("a1".into());
    accepted.index_message = Some(("msg-0".into(), to_a.clone()));
    accepted.next_check = NextCheck::At(m(600));
    out.push(line("accepted 0", l.transition(accepted.clone()).await));
    out.push(line("accepted 0 again", l.transition(accepted.clone()).await));
    let mut wrong = accepted.clone();
    wrong.key = key(1);
    wrong.attempt_id = Some("not-b1".into());
    wrong.observation.id = "attempt:x:accepted".into();
    wrong.index_message = None;
    out.push(line("accepted 1 by another attempt", l.transition(wrong).await));

    // A delivery record, state first, on a presumed record.
    let delivered = |id: &str| {
        let mut t = transition(
            &key(0),
            vec![State::Accepted],
            StatusPatch {
                state: Some(State::Delivered),
                final_at: Some(m(30)),
                clear_claim: true,
                ..Default::default()
            },
            obs(
                id,
                m(30),
                ObservationKind::DeliveryStatus {
                    log_event_id: id.trim_start_matches("log:").into(),
                    sns_message_id: "msg-0".into(),
                    status: "SUCCESS".into(),
                    provider_response: Some("ok".into()),
                    class: None,
                    carrier: None,
                    dwell_ms: Some(900),
                    effect: ReceiptEffect::Moved { from: State::Accepted, to: State::Delivered },
                    late: false,
                },
                Some(State::Delivered),
            ),
            Commit::Carried,
        );
        t.expect = Expect { sns_message_id: Some("msg-0".into()), not_escalated: true, ..Default::default() };
        t.next_check = NextCheck::Remove;
        t
    };
    // A provider's progress (the carrier's acceptance): no state change, carried on the intent
    // under the state it was decided on.
    let progress = |id: &str, from: State| {
        let mut t = transition(
            &key(0),
            vec![from],
            StatusPatch::default(),
            obs(id, m(29), ObservationKind::DelaySuspected, Some(from)),
            Commit::Carried,
        );
        t.expect = Expect { sns_message_id: Some("msg-0".into()), not_escalated: true, ..Default::default() };
        t
    };
    out.push(line("progress 0", l.transition(progress("log:0", State::Accepted)).await));
    out.push(line("progress 0 again (redelivered event)", l.transition(progress("log:0", State::Accepted)).await));
    out.push(line(
        "progress 0 on a state it is not in (refused)",
        l.transition(progress("log:00", State::Sending)).await,
    ));
    // The delivery carries along the progress events logged before it in its batch: one kept as
    // the intent already carries it ("log:0", written above: its state stays Accepted), one new.
    let mut delivered_along = delivered("log:1");
    delivered_along.carried_along = vec![
        obs("log:0", m(29), ObservationKind::DelaySuspected, Some(State::Sending)),
        obs("log:0b", m(29), ObservationKind::DelaySuspected, Some(State::Accepted)),
    ];
    out.push(line("delivered 0, carrying progress along", l.transition(delivered_along).await));
    out.push(line("delivered 0 again (redelivered event)", l.transition(delivered("log:1")).await));
    out.push(line("delivered 0 by another event (refused)", l.transition(delivered("log:2")).await));
    // A record that changes no state: an observation under a condition (atomic).
    let mut conflicting = transition(
        &key(0),
        vec![State::Delivered],
        StatusPatch { add_conflict: true, ..Default::default() },
        obs("log:3", m(40), ObservationKind::DelaySuspected, Some(State::Delivered)),
        Commit::Atomic,
    );
    out.push(line("conflicting 0", l.transition(conflicting.clone()).await));
    out.push(line("conflicting 0 again", l.transition(conflicting.clone()).await));
    conflicting.patch = StatusPatch::default();
    conflicting.observation.id = "log:4".into();
    out.push(line("observation under a condition 0", l.transition(conflicting.clone()).await));
    conflicting.from = vec![State::Failed];
    conflicting.observation.id = "log:5".into();
    out.push(line("observation under a failing condition 0", l.transition(conflicting).await));
    out.push(line(
        "observations 0",
        l.observations(&key(0)).await.map(|os| os.iter().map(|o| (o.id.clone(), o.state_after)).collect::<Vec<_>>()),
    ));
    out.push(line("get 0 after", l.get(&key(0)).await));

    // Escalation: lease, the escalation fact (atomic, with its open-escalations entry).
    out.push(line(
        "lease 2",
        l.lease_escalation(&key(2), "run-1", m(50), m(170)).await.map(|r| r.map(|r| r.status.state)),
    ));
    out.push(line(
        "lease 2 again (held)",
        l.lease_escalation(&key(2), "run-2", m(60), m(180)).await.map(|r| r.is_some()),
    ));
    out.push(line(
        "lease 2 after it lapsed",
        l.lease_escalation(&key(2), "run-3", m(200), m(320)).await.map(|r| r.is_some()),
    ));
    out.push(line(
        "lease 0 (delivered)",
        l.lease_escalation(&key(0), "run-1", m(50), m(170)).await.map(|r| r.is_some()),
    ));
    let escalate = transition(
        &key(2),
        vec![],
        StatusPatch {
            escalation: Some(Escalation { at: m(210), reason: "late".into(), folded: true, to_level: None }),
            ..Default::default()
        },
        obs("escalation", m(210), ObservationKind::Escalated { reason: "late".into(), run_id: "run-3".into() }, None),
        Commit::Atomic,
    );
    out.push(line("escalate 2", l.transition(escalate.clone()).await));
    out.push(line("escalate 2 again", l.transition(escalate).await));
    out.push(line(
        "lease 2 (escalated)",
        l.lease_escalation(&key(2), "run-4", m(400), m(520)).await.map(|r| r.is_some()),
    ));
    out.push(line("oldest open escalation", l.oldest_open_escalation().await));

    // The due index and next checks.
    out.push(line(
        "next check 3 at +30s in received",
        l.set_next_check(&key(3), NextCheck::At(m(30)), Some(State::Received)).await,
    ));
    out.push(line(
        "next check 3 in a state it is not in",
        l.set_next_check(&key(3), NextCheck::At(m(5)), Some(State::Queued)).await,
    ));
    out.push(line("next check 4 removed", l.set_next_check(&key(4), NextCheck::Remove, None).await));
    out.push(line(
        "claim 4, which has no next check: the lease's end is its check",
        l.claim(&key(4), "d1", m(40), m(100)).await,
    ));
    out.push(line(
        "check 3 brought forward to +10s while received",
        l.bring_check_forward(&key(3), m(10), &[State::Received]).await,
    ));
    out.push(line(
        "check 3 'brought forward' to +20s: later than it has, kept at +10s",
        l.bring_check_forward(&key(3), m(20), &[State::Received]).await,
    ));
    out.push(line(
        "check 0 (delivered) brought forward while awaiting a receipt: not put back",
        l.bring_check_forward(&key(0), m(1), &State::AWAITING_RECEIPT).await,
    ));
    for at in [m(0), m(15), m(60), m(120), m(900)] {
        let mut due = Vec::new();
        for shard in l.due_shards() {
            let mut after = None;
            loop {
                let (keys, next) = l.due(&shard, at, 2, after).await.expect("due");
                due.extend(keys);
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        due.sort();
        let names: Vec<usize> = due.iter().filter_map(|k| (0..6).find(|n| key(*n) == *k)).collect();
        out.push(line(&format!("due at {}s", (at - t0).num_seconds()), names));
    }

    // The pending index: a person's backlog.
    let names = |v: &[(IdempotencyKey, DateTime<Utc>)]| {
        v.iter().filter_map(|(k, _)| (0..6).find(|n| key(*n) == *k)).collect::<Vec<_>>()
    };
    out.push(line("pending for a", l.pending_for(&to_a, t0, 10).await.map(|v| names(&v))));
    out.push(line("pending for b, one", l.pending_for(&to_b, t0, 1).await.map(|v| names(&v))));

    // The message index and orphans.
    out.push(line("lookup msg-0", l.lookup("msg-0").await));
    out.push(line("lookup unknown", l.lookup("msg-x").await));
    let orphan = OrphanRecord {
        log_event_id: "e1".into(),
        sns_message_id: "msg-f".into(),
        log_group: "g".into(),
        message: "{}".into(),
        received_at: m(70),
        expires_at: m(70 + 6 * 3600),
    };
    out.push(line("keep orphans", l.keep_orphans(&[orphan.clone(), orphan.clone()]).await));
    let second = OrphanRecord { log_event_id: "e2".into(), ..orphan.clone() };
    out.push(line("keep orphans again, and a second record", l.keep_orphans(&[orphan, second]).await));
    let orphans = |v: PortResult<Vec<OrphanRecord>>| v.map(|v| v.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>());
    out.push(line("orphans of msg-f", orphans(l.orphans_of("msg-f").await)));
    out.push(line("orphans of msg-0", orphans(l.orphans_of("msg-0").await)));
    let found = l.lookup_many(&["msg-0".into(), "msg-f".into(), "msg-0".into()]).await.expect("lookup");
    let found: BTreeMap<String, String> = found.into_iter().map(|(k, v)| (k, format!("{v:?}"))).collect();
    out.push(line("lookup many", found));

    // The per-recipient send log: its conditional append is a lock.
    let log = l.send_log(&to_a).await.expect("log");
    out.push(line("send log a", &log));
    out.push(line("record send on the empty log", l.record_send(&to_a, &log, m(80), 3, m(380)).await));
    out.push(line("record send on the same (stale) read", l.record_send(&to_a, &log, m(81), 3, m(381)).await));
    let log = l.send_log(&to_a).await.expect("log");
    out.push(line("send log a after", &log));
    let stale = SendLog { sent: vec![], version: Some(7) };
    out.push(line("record send on a wrong version", l.record_send(&to_a, &stale, m(82), 3, m(382)).await));
    for s in 0..4 {
        let log = l.send_log(&to_a).await.expect("log");
        out.push(line("record send, keeping three", l.record_send(&to_a, &log, m(90 + s), 3, m(390)).await));
    }
    out.push(line("send log a kept", l.send_log(&to_a).await));

    // Per-producer admission: counted up to the limit per window, each producer and window apart.
    let (billing, monitoring) =
        (ProducerName::parse("billing").expect("name"), ProducerName::parse("monitoring").expect("name"));
    let w1 = ProducerRate::window(m(95));
    let w2 = ProducerRate::window(m(95 + 60));
    for n in 0..3 {
        out.push(line(&format!("admit billing #{n} in w1, limit 2"), l.admit(&billing, &w1, 2).await));
    }
    out.push(line("admit monitoring in w1, limit 2", l.admit(&monitoring, &w1, 2).await));
    out.push(line("admit billing in w2, limit 2", l.admit(&billing, &w2, 2).await));
    out.push(line("admit billing in w1, limit raised to 3", l.admit(&billing, &w1, 3).await));

    // Per-producer escalation counters: counted per producer and hour; the cap's notice recorded.
    let hour_later = tocsin::domain::spend::hour_of(m(96)) + Duration::hours(1);
    for n in 1..=2 {
        out.push(line(&format!("count escalation #{n} of billing"), l.count_escalation(&billing, m(96)).await));
    }
    out.push(line("billing's notice sent", l.escalation_notice_sent(&billing, m(96)).await));
    out.push(line("count escalation of billing after the notice", l.count_escalation(&billing, m(97)).await));
    out.push(line("count escalation of monitoring", l.count_escalation(&monitoring, m(97)).await));
    out.push(line("count escalation of billing an hour later", l.count_escalation(&billing, hour_later).await));

    // The stack's SMS spend meter: parts counted per hour up to the ceiling; of two sends that
    // would both pass it, one is counted and one opens the breaker; once open, everything is
    // withheld, in the next hour too.
    let ceiling = SpendCeiling { parts_per_hour: 5 };
    let hour = tocsin::domain::spend::hour_of(m(96));
    let at = |s: i64| hour + Duration::seconds(s);
    out.push(line("spend 3 of 5", l.spend(3, at(1), ceiling).await));
    let (a, b) = futures::join!(l.spend(2, at(2), ceiling), l.spend(2, at(2), ceiling));
    let answers = [a.expect("meter"), b.expect("meter")];
    out.push(line(
        "two concurrent sends of 2 at 3 of 5: counted, opened here",
        (
            answers.iter().filter(|s| **s == Spend::Counted).count(),
            answers.iter().filter(|s| matches!(s, Spend::Withheld { opened_here: true, .. })).count(),
        ),
    ));
    out.push(line("spend 1 after it opened", l.spend(1, at(3), ceiling).await));
    out.push(line("spend 1 in the next hour", l.spend(1, at(3600 + 1), ceiling).await));

    // Digests: recorded, indexed for every member, found by recipient and time, their fate.
    let members = vec![key(4), key(5)];
    let digest = DigestRecord {
        id: DigestId::derive(members.iter()),
        recipient: to_b.clone(),
        members: members.clone(),
        segments: 1,
        created_at: m(100),
        expires_at: m(100 + 30 * 86_400),
        outcome: None,
    };
    out.push(line("put digest", l.put_digest(&digest).await));
    out.push(line("get digest", l.get_digest(&digest.id).await));
    out.push(line("digests to b around it", l.digests_to(&to_b, m(60), m(160)).await.map(|v| v.len())));
    out.push(line("digests to b before it", l.digests_to(&to_b, m(0), m(60)).await.map(|v| v.len())));
    out.push(line("index digest msg-d", l.index_digest_message("msg-d", &digest).await));
    out.push(line("lookup msg-d", l.lookup("msg-d").await.map(|e| e.map(|e| (e.covers(&key(5)), e.covers(&key(3)))))));
    let outcome = |id: &str| LoggedRecord {
        log_event_id: id.into(),
        timestamp_ms: to_ms(m(110)),
        message: format!("record {id}"),
    };
    out.push(line("digest outcome", l.record_digest_outcome(&digest.id, &outcome("e-1")).await));
    out.push(line(
        "digest outcome again (the first is kept)",
        l.record_digest_outcome(&digest.id, &outcome("e-2")).await,
    ));
    out.push(line("digest with its outcome", l.get_digest(&digest.id).await.map(|d| d.and_then(|d| d.outcome))));
    // The in-flight index: every SMS accepted since an instant, newest first, in its state now.
    out.push(line("accepted since t0", l.accepted_since(t0, 100).await));
    out.push(line("accepted since t0, at most 1", l.accepted_since(t0, 1).await.map(|v| v.len())));
    out.push(line("accepted since later", l.accepted_since(m(3600), 100).await));
    // A claim whose intent's next check is later than the lease's end (re-enqueued a while ago):
    // the claim itself moves the check to the lease's end.
    out.push(line(
        "next check 5 at +3000s in received",
        l.set_next_check(&key(5), NextCheck::At(m(3000)), Some(State::Received)).await,
    ));
    out.push(line(
        "claim 5, whose check is later than the lease's end: the lease's end is its check",
        l.claim(&key(5), "e1", m(500), m(620)).await.map(|o| match o {
            ClaimOutcome::Claimed(r) => format!("claimed, next check {:?}", r.status.next_check),
            other => format!("{other:?}"),
        }),
    ));
    out.push(line("get 5 after", l.get(&key(5)).await.map(|r| r.map(|r| (r.status.state, r.status.next_check)))));
    out
}

/// The carrier view's registry contract: last-seen carriers and audited holds.
async fn carrier_contract<R: CarrierBook + CarrierHolds>(r: &R, t0: DateTime<Utc>) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (PhoneNumber::parse("+12065550105").expect("n"), PhoneNumber::parse("+12065550106").expect("n"));
    let seen = |carrier: &str, s: i64| CarrierSeen {
        carrier: carrier.into(),
        mcc: Some("310".into()),
        mnc: (s > 0).then(|| "260".into()),
        at: t0 + Duration::seconds(s),
    };
    out.push(line("carriers of none seen", r.carriers_of(&[a.clone(), b.clone()]).await));
    out.push(line("record a", r.record_carrier(&a, &seen("T-Mobile", 10)).await));
    out.push(line("record a older", r.record_carrier(&a, &seen("Old Tel", 5)).await));
    out.push(line("carriers of a, b", r.carriers_of(&[a.clone(), b.clone()]).await));
    out.push(line("record a again", r.record_carrier(&a, &seen("T-Mobile", 10)).await));
    out.push(line("record a newer", r.record_carrier(&a, &seen("AT&T", 20)).await));
    out.push(line("carriers of a", r.carriers_of(std::slice::from_ref(&a)).await));
    let hold = CarrierHold {
        carrier: "AT&T".into(),
        operator: "ana".into(),
        reason: "incident 1".into(),
        since: t0,
        until: t0 + Duration::hours(1),
    };
    out.push(line("holds none", r.active_holds(t0).await));
    out.push(line("hold", r.hold(&hold).await));
    out.push(line("holds", r.active_holds(t0 + Duration::minutes(1)).await));
    out.push(line("holds after its end", r.active_holds(t0 + Duration::hours(2)).await));
    out.push(line("release another", r.release("Verizon", "bob", "x", t0 + Duration::minutes(2)).await));
    out.push(line("release", r.release("AT&T", "bob", "resolved", t0 + Duration::minutes(3)).await));
    out.push(line("release again", r.release("AT&T", "bob", "again", t0 + Duration::minutes(4)).await));
    out.push(line("holds released", r.active_holds(t0 + Duration::minutes(5)).await));
    out.push(line("history", r.hold_history("AT&T").await));
    out
}

/// The carrier traffic contract: tallies added (twice: a retried batch counts twice) and read
/// back by minute range across an hour partition's edge, and the baseline saved only over the
/// one it was read at.
async fn traffic_contract<R: CarrierTraffic>(r: &R, t0: DateTime<Utc>) -> Vec<String> {
    let mut out = Vec::new();
    // The last minute of an hour and the first of the next: two partitions.
    let edge = minute_of(t0).div_euclid(60) * 60 - 1;
    let tally = |n: u64, slow: u64| Tally {
        records: n,
        delivered: n - 1,
        failed: 1,
        slow,
        dwell_ms: n * 4_000,
        slow_dwell_ms: slow * 700_000,
        // Some of them this stack's own.
        tocsin: n / 2,
        tocsin_slow: slow / 2,
    };
    let key = |minute: i64, carrier: &str, country: &str| (minute, carrier.to_owned(), country.to_owned());
    let batch: CountryTallies = [
        (key(edge - 1, "AT&T", "US"), tally(3, 0)),
        (key(edge, "AT&T", "US"), tally(5, 1)),
        (key(edge, "T-Mobile", "US"), tally(7, 0)),
        // One name, two countries' networks; a carrier name may hold the separator.
        (key(edge, "T-Mobile", "DE"), tally(4, 0)),
        (key(edge, "A#B", "NL"), tally(2, 0)),
        (key(edge + 1, "T-Mobile", "US"), tally(2, 2)),
        (key(edge + 1, "unknown", "unknown"), tally(1, 0)),
    ]
    .into_iter()
    .collect();
    let batch_per_carrier = carrier_traffic::per_carrier(&batch);
    out.push(line("baseline before any", r.baseline().await));
    out.push(line("tallies before any", r.tallies(edge - 1, edge + 1).await));
    out.push(line("add", r.add_tallies(&batch).await));
    out.push(line("add again (a retried batch)", r.add_tallies(&batch).await));
    out.push(line("tallies across the hour", r.tallies(edge, edge + 1).await));
    out.push(line("tallies of one minute", r.tallies(edge - 1, edge - 1).await));
    let policy = TrafficPolicy::new(std::time::Duration::from_secs(600));
    let read = r.baseline().await.expect("baseline");
    let first = carrier_traffic::fold(&read, &batch_per_carrier, edge, &Default::default(), &policy);
    out.push(line("save the first", r.save_baseline(&first, read.through).await));
    out.push(line("save another first (a concurrent sweep)", r.save_baseline(&first, None).await));
    out.push(line("baseline", r.baseline().await));
    let mut next = carrier_traffic::fold(&first, &batch_per_carrier, edge + 1, &Default::default(), &policy);
    next.degraded_since.insert("AT&T".into(), edge + 1);
    out.push(line("save over the first", r.save_baseline(&next, first.through).await));
    out.push(line("save over the first again (stale)", r.save_baseline(&first, first.through).await));
    out.push(line("baseline after", r.baseline().await));
    out
}

/// The registry contract.
async fn registry_contract<R: RecipientRegistry>(r: &R, t0: DateTime<Utc>) -> Vec<String> {
    let mut out = Vec::new();
    let p = PhoneNumber::parse("+12065550103").expect("number");
    out.push(line("standing", r.standing(&p).await));
    out.push(line("re-enable a clear number", r.re_enable(&p, "op", "why", t0).await));
    let evidence = SuppressionEvidence {
        log_event_id: "e9".into(),
        provider_response: Some("Phone number is opted out".into()),
        at: t0,
        intent_key: "k".into(),
        table_version: "v".into(),
    };
    out.push(line("suppress", r.suppress(&p, &evidence).await));
    out.push(line("suppress again", r.suppress(&p, &evidence).await));
    out.push(line("standing suppressed", r.standing(&p).await));
    out.push(line("suppression", r.suppression(&p).await));
    out.push(line("re-enable", r.re_enable(&p, "op", "why", t0 + Duration::seconds(1)).await));
    out.push(line("standing re-enabled", r.standing(&p).await));
    out.push(line("opt-out checked", r.opt_out_checked(&p).await));
    out.push(line("standing after the check", r.standing(&p).await));
    out.push(line("re-enable again", r.re_enable(&p, "op", "why", t0 + Duration::seconds(2)).await));
    out
}

/// The reply codes contract (issue 37): a code is given once until its alert closed a day ago;
/// sent and closed only while it is the subject's open code; what a phone holds reads back whole.
async fn reply_codes_contract<L: ReplyCodes>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    let mut out = Vec::new();
    let p = PhoneNumber::parse("+12065550177").expect("number");
    let other = PhoneNumber::parse("+12065550178").expect("number");
    let key = |n: u8| AckSubject::Alert(IdempotencyKey::parse(&format!("{n:02x}").repeat(32)).expect("key"));
    let digest = AckSubject::Digest(DigestId::parse(&"d1".repeat(32)).expect("digest id"));
    let code = |n: u16| ReplyCode::new(n).expect("code");
    let later = |s: i64| t0 + Duration::seconds(s);
    let exp = t0 + Duration::days(31);
    out.push(line("held, none", l.held_codes(&p).await));
    out.push(line("give 1 to a", l.give_code(&p, code(1), &key(1), t0, exp).await));
    out.push(line("give 1 to b (open)", l.give_code(&p, code(1), &key(2), later(1), exp).await));
    out.push(line("give 2 to the digest", l.give_code(&p, code(2), &digest, later(2), exp).await));
    out.push(line("give 1 on another phone", l.give_code(&other, code(1), &key(3), later(2), exp).await));
    out.push(line("sent 1 as b (not b's)", l.code_sent(&p, code(1), &key(2), later(3)).await));
    out.push(line("sent 1 as a", l.code_sent(&p, code(1), &key(1), later(3)).await));
    out.push(line("sent 7 (never given)", l.code_sent(&p, code(7), &key(1), later(3)).await));
    out.push(line("held", l.held_codes(&p).await));
    out.push(line("close 1 as b (not b's)", l.close_code(&p, code(1), &key(2), later(4)).await));
    out.push(line("close 1 as a", l.close_code(&p, code(1), &key(1), later(5)).await));
    out.push(line("close 1 as a again", l.close_code(&p, code(1), &key(1), later(6)).await));
    out.push(line("sent 1 after close", l.code_sent(&p, code(1), &key(1), later(6)).await));
    out.push(line("give 1 to b, closed a moment ago", l.give_code(&p, code(1), &key(2), later(7), exp).await));
    let a_day_on = later(5) + tocsin::domain::reply::code::REUSE_AFTER;
    out.push(line("give 1 to b, exactly a day after", l.give_code(&p, code(1), &key(2), a_day_on, exp).await));
    let past = a_day_on + Duration::seconds(1);
    out.push(line("give 1 to b, past a day", l.give_code(&p, code(1), &key(2), past, exp).await));
    out.push(line("held after reuse", l.held_codes(&p).await));
    // Never closed: the digest's code lapsed a day after it was given, reusable a day later.
    let lapsed = later(2) + tocsin::domain::reply::code::OPEN_FOR + tocsin::domain::reply::code::REUSE_AFTER;
    let just_before = lapsed - Duration::seconds(1);
    out.push(line(
        "give 2 to c, a moment before it is free",
        l.give_code(&p, code(2), &key(3), just_before, exp).await,
    ));
    out.push(line("give 2 to c, two days after it was given", l.give_code(&p, code(2), &key(3), lapsed, exp).await));
    out.push(line("held on the other phone", l.held_codes(&other).await));
    out
}

/// The acknowledgement contract (issue 37): recorded once, with its observation; a second one
/// learns whose stands; the state is left as it was.
async fn ack_contract<L: Ledger>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    use tocsin::domain::acknowledgement::AckVia;
    use tocsin::services::acknowledging::acknowledge_alert;
    let mut out = Vec::new();
    let r = intent(60, "+12065550179", t0, 10);
    let key = r.intent.key.clone();
    out.push(line(
        "ack a missing intent",
        acknowledge_alert(l, &key, "dana", AckVia::Operator, "r0", t0).await.map_err(|e| e.to_string()),
    ));
    l.put_new(&r, t0).await.expect("put");
    let first = acknowledge_alert(l, &key, "dana", AckVia::Operator, "r1", later_ms(t0, 1)).await;
    out.push(line("ack", first.map_err(|e| e.to_string())));
    let second = acknowledge_alert(l, &key, "+1******0179", AckVia::Reply, "in-1", later_ms(t0, 2)).await;
    out.push(line("ack again", second.map_err(|e| e.to_string())));
    let stored = l.get(&key).await.map(|r| r.map(|r| (r.status.state, r.status.acknowledgement)));
    out.push(line("stored", stored));
    let acks: Vec<String> = l
        .observations(&key)
        .await
        .map(|obs| {
            obs.into_iter().filter(|o| matches!(o.kind, ObservationKind::Acknowledged { .. })).map(|o| o.id).collect()
        })
        .unwrap_or_default();
    out.push(line("acknowledgements in the timeline", acks));
    out
}

/// An operator's resend never slips between a sweep's lease, on which the run decides, and its
/// page or the chain's next level (long mode, SNS seed 170134): its claim is refused while an
/// escalation run holds the intent, and taken once that run's lease has lapsed.
async fn resend_contract<L: Ledger>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    use tocsin::services::operator::{OperatorClaim, claim_for_operator};
    let mut out = Vec::new();
    let r = intent(61, "+12065550180", t0, 10);
    let key = r.intent.key.clone();
    l.put_new(&r, t0).await.expect("put");
    let unknown = transition(
        &key,
        vec![State::Received],
        StatusPatch { state: Some(State::SendUnknown), ..Default::default() },
        obs(
            "attempt:a:unknown",
            later_ms(t0, 1),
            ObservationKind::SendUnknown { attempt_id: "a".into(), cause: "operation timeout".into() },
            Some(State::SendUnknown),
        ),
        Commit::Atomic,
    );
    out.push(line("send unknown", l.transition(unknown).await));
    let leased = l.lease_escalation(&key, "run-1", later_ms(t0, 10), later_ms(t0, 130)).await;
    out.push(line("lease", leased.map(|r| r.map(|r| (r.status.state, r.status.escalation_run_until)))));
    let claim = |now: DateTime<Utc>| OperatorClaim {
        key: &key,
        attempt_id: "operator:c1",
        operator: "dana",
        reason: "contract",
        now,
        lease_until: now + Duration::minutes(2),
    };
    let during = claim_for_operator(l, claim(later_ms(t0, 20))).await;
    out.push(line(
        "resend while the run holds it",
        during.map(|o| format!("{o:?}").split('(').next().map(str::to_owned)),
    ));
    out.push(line("held until", l.get(&key).await.map(|r| r.map(|r| r.status.escalation_run_until))));
    let after = claim_for_operator(l, claim(later_ms(t0, 140))).await;
    out.push(line(
        "resend once its lease lapsed",
        after.map(|o| format!("{o:?}").split('(').next().map(str::to_owned)),
    ));
    out.push(line("stored", l.get(&key).await.map(|r| r.map(|r| (r.status.state, r.status.attempt_id)))));
    out
}

fn later_ms(t0: DateTime<Utc>, seconds: i64) -> DateTime<Utc> {
    t0 + Duration::seconds(seconds)
}

/// The recipients roster contract: every entry, in the table's order.
async fn roster_contract<R: RecipientRoster>(r: &R) -> Vec<String> {
    let entries = r.roster().await.map(|r| r.entries.iter().map(|e| e.as_str().to_owned()).collect::<Vec<_>>());
    vec![line("roster", entries)]
}

/// The templates' chain policies, as written by `tocsin chains set` (two templates, one set twice).
fn chain_policies(t0: DateTime<Utc>) -> Vec<tocsin::domain::chain_policy::ChainPolicy> {
    let policy = |template: &str, chain: serde_json::Value, at: DateTime<Utc>| {
        tocsin::domain::chain_policy::ChainPolicy::parse(template, &chain, at, Catalog::builtin()).expect("policy")
    };
    vec![
        policy("service_down", serde_json::json!({"wait": "2m"}), t0),
        policy("disk_full", serde_json::json!({"wait": "5m"}), t0),
        policy(
            "disk_full",
            serde_json::json!({"wait": "5m", "repeats": 1, "then": [{"to": "+12065550199", "wait": "10m"}]}),
            later_ms(t0, 1),
        ),
    ]
}

/// The chain policies contract: every template's chain as read, with the version it is.
async fn chain_policies_contract<P: ChainPolicySource>(p: &P) -> Vec<String> {
    let policies = p.chain_policies().await.map(|all| {
        all.iter().map(|c| format!("{} {} {}", c.template, c.shape.summary(true), c.set_at)).collect::<Vec<_>>()
    });
    vec![line("chain policies", policies)]
}

/// The send queue and urgent lane contract.
async fn queue_contract<Q: SendQueue + UrgentLane>(q: &Q, k: &IdempotencyKey) -> Vec<String> {
    let mut out = Vec::new();
    out.push(line("backlog empty", q.backlog(Lane::Normal).await));
    out.push(line("enqueue normal", q.enqueue(k, Lane::Normal, std::time::Duration::ZERO).await));
    out.push(line("enqueue urgent", q.enqueue(k, Lane::Urgent, std::time::Duration::ZERO).await));
    out.push(line("backlog normal", q.backlog(Lane::Normal).await));
    out.push(line("backlog urgent", q.backlog(Lane::Urgent).await));
    let taken = q.take_urgent(10).await.expect("take");
    out.push(line("take urgent", taken.iter().map(|m| m.body.clone()).collect::<Vec<_>>()));
    out.push(line("backlog urgent while taken", q.backlog(Lane::Urgent).await));
    out.push(line("take urgent again", q.take_urgent(10).await.map(|v| v.len())));
    let handle = taken.first().map(|m| m.receipt_handle.clone()).unwrap_or_default();
    out.push(line("delay it", q.delay_retry(&handle, 60, Lane::Urgent).await.is_ok()));
    out.push(line("urgent done", q.urgent_done(std::slice::from_ref(&handle)).await));
    out.push(line("delay a deleted one", q.delay_retry(&handle, 60, Lane::Urgent).await.is_ok()));
    out
}

/// The simulated world for the contracts: every call answers at once, without faults.
fn sim_world() -> Sim {
    let sim = Sim::new(1, Utc::now().timestamp_millis(), World::new(1, FaultPlan::none(), Sms::new(20)));
    sim.lock().core.immediate = true;
    sim.lock().world.sqs.configure(tocsin_sim::world::sqs::QueueName::Urgent, 30_000, Some(8));
    sim
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

fn assert_same(what: &str, sim: &[String], emulator: &[String]) {
    for (i, (a, b)) in sim.iter().zip(emulator).enumerate() {
        assert_eq!(a, b, "{what}: line {i} differs (simulation, then emulator)");
    }
    assert_eq!(sim.len(), emulator.len(), "{what}: transcripts differ in length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_ports_answer_as_the_aws_adapters_do_on_the_emulator() {
    let t0 = base();
    let p = tocsin_tests::Pipeline::start().await;
    let emulator_ledger = Box::pin(ledger_contract(&p.ledger, t0)).await;
    // A claim whose intent's check was later than the lease's end moved it to the lease's end.
    let claimed = emulator_ledger.iter().find(|l| l.starts_with("get 5 after =>")).expect("get 5 after");
    let lease_end = format!("{:?}", Some(t0 + Duration::seconds(620)));
    assert!(claimed.contains("Sending") && claimed.contains(&lease_end), "{claimed} (lease end {lease_end})");
    // Progress carried along with a delivery: the new one kept, the one already carried unchanged.
    let observations = emulator_ledger.iter().find(|l| l.starts_with("observations 0 =>")).expect("observations 0");
    assert!(
        observations.contains(r#"("log:0", Some(Accepted))"#) && observations.contains(r#"("log:0b", Some(Accepted))"#),
        "{observations}"
    );
    let emulator_registry = Box::pin(registry_contract(&p.registry, t0)).await;
    let emulator_carriers = Box::pin(carrier_contract(&p.registry, t0)).await;
    let emulator_traffic = Box::pin(traffic_contract(&p.registry, t0)).await;
    let k = IdempotencyKey::derive(
        &tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
        "contract:queue",
        &intent(0, "+12065550101", t0, 10).intent.template,
    );
    let emulator_queue = Box::pin(queue_contract(&p.sender.queue, &k)).await;
    let emulator_roster = Box::pin(roster_contract(&p.registry)).await;
    let emulator_codes = Box::pin(reply_codes_contract(&p.ledger, t0)).await;
    for policy in chain_policies(t0) {
        p.registry.set_chain_policy(&policy, "alice", "contract").await.expect("set");
    }
    let emulator_policies = Box::pin(chain_policies_contract(&p.registry)).await;

    let sim = sim_world();
    let ledger = SimLedger { sim: sim.clone(), shards: 16 };
    let sim_ledger = block_on(Box::pin(ledger_contract(&ledger, t0)));
    let sim_codes = block_on(Box::pin(reply_codes_contract(&ledger, t0)));
    let sim_registry = block_on(Box::pin(registry_contract(&SimRegistry { sim: sim.clone() }, t0)));
    let sim_carriers = block_on(Box::pin(carrier_contract(&SimRegistry { sim: sim.clone() }, t0)));
    let sim_traffic = block_on(Box::pin(traffic_contract(&SimRegistry { sim: sim.clone() }, t0)));
    let sim_queue = block_on(Box::pin(queue_contract(&SimSqs::new(sim.clone()), &k)));
    // The local stack's roster, as the harness's deploy leaves it (written in another order).
    sim.lock().world.registry.roster = tocsin_harness::stack::LOCAL_ROSTER
        .iter()
        .rev()
        .map(|e| tocsin::domain::roster::RosterEntry::parse(e).expect("entry"))
        .collect();
    let sim_roster = block_on(Box::pin(roster_contract(&SimRegistry { sim: sim.clone() })));
    // As `tocsin chains set` leaves them: one per template, the last set.
    let mut policies: BTreeMap<String, _> = BTreeMap::new();
    for policy in chain_policies(t0) {
        policies.insert(policy.template.clone(), policy);
    }
    sim.lock().world.registry.chain_policies = policies.into_values().rev().collect();
    let sim_policies = block_on(Box::pin(chain_policies_contract(&SimRegistry { sim: sim.clone() })));

    assert_same("ledger", &sim_ledger, &emulator_ledger);
    assert_same("registry", &sim_registry, &emulator_registry);
    assert_same("carriers", &sim_carriers, &emulator_carriers);
    assert_same("carrier traffic", &sim_traffic, &emulator_traffic);
    assert_same("queues", &sim_queue, &emulator_queue);
    assert_same("roster", &sim_roster, &emulator_roster);
    assert_same("reply codes", &sim_codes, &emulator_codes);
    assert_same("chain policies", &sim_policies, &emulator_policies);
    // Both sides could agree and be wrong: the answers that are the mechanism, spelt out.
    for expected in [
        "give 1 to a => Ok(true)",
        "give 1 to b (open) => Ok(false)",
        "give 2 to the digest => Ok(true)",
        "give 1 on another phone => Ok(true)",
        "sent 1 as b (not b's) => Ok(false)",
        "sent 1 as a => Ok(true)",
        "sent 7 (never given) => Ok(false)",
        "close 1 as b (not b's) => Ok(false)",
        "close 1 as a => Ok(true)",
        "close 1 as a again => Ok(false)",
        "sent 1 after close => Ok(false)",
        "give 1 to b, closed a moment ago => Ok(false)",
        "give 1 to b, exactly a day after => Ok(true)",
        "give 1 to b, past a day => Ok(false)",
        "give 2 to c, a moment before it is free => Ok(false)",
        "give 2 to c, two days after it was given => Ok(true)",
    ] {
        assert!(
            emulator_codes.iter().any(|l| l == expected),
            "reply codes: no line {expected:?} in {emulator_codes:#?}"
        );
    }
    // One per template, the last set: disk_full's second chain, service_down's.
    let expected = format!(
        "chain policies => Ok([\"disk_full recipient 5m ×2 → +12065550199 10m → on-call {}\", \"service_down recipient 2m → on-call {t0}\"])",
        later_ms(t0, 1)
    );
    assert_eq!(emulator_policies, [expected]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_ledger_records_an_acknowledgement_as_the_adapter_does() {
    let t0 = base();
    let p = tocsin_tests::Pipeline::start().await;
    let emulator_acks = ack_contract(&p.ledger, t0).await;
    let ledger = SimLedger { sim: sim_world(), shards: 16 };
    let sim_acks = block_on(ack_contract(&ledger, t0));
    assert_same("acknowledgements", &sim_acks, &emulator_acks);
    assert!(emulator_acks[1].starts_with("ack => Ok(Now("), "{emulator_acks:#?}");
    assert!(
        emulator_acks[2].starts_with("ack again => Ok(Before(") && emulator_acks[2].contains("dana"),
        "{emulator_acks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_ledger_refuses_a_resend_while_an_escalation_run_holds_the_alert_as_the_adapter_does() {
    let t0 = base();
    let p = tocsin_tests::Pipeline::start().await;
    let emulator = Box::pin(resend_contract(&p.ledger, t0)).await;
    let ledger = SimLedger { sim: sim_world(), shards: 16 };
    let sim = block_on(Box::pin(resend_contract(&ledger, t0)));
    assert_same("resend during an escalation run", &sim, &emulator);
    assert_eq!(
        [&emulator[2], &emulator[4]],
        [
            r#"resend while the run holds it => Ok(Some("BeingEscalated"))"#,
            r#"resend once its lease lapsed => Ok(Some("Claimed"))"#,
        ],
        "{emulator:#?}"
    );
    // Until when the run holds it, read back as the lease wrote it: what the CLI tells the operator.
    let until = later_ms(t0, 130);
    assert_eq!(emulator[3], format!("held until => Ok(Some(Some({until:?})))"), "{emulator:#?}");
}

/// The confirmations contract (issue 37): one per reply (a copy finds it claimed), at most the
/// cap per phone in the reply's hour, a new hour starting afresh, phones counted apart.
async fn confirmations_contract<L: ReplyConfirmations>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    let p = PhoneNumber::parse("+12065550181").expect("number");
    let other = PhoneNumber::parse("+12065550182").expect("number");
    let hour = t0.date_naive().and_hms_opt(3, 0, 0).expect("time").and_utc();
    let exp = hour + Duration::days(2);
    let mut out = Vec::new();
    let mut claim = async |phone: &PhoneNumber, id: &str, at: DateTime<Utc>, what: &str| {
        out.push(line(what, l.claim_confirmation(phone, id, at, 2, exp).await));
    };
    claim(&p, "in-1", hour, "in-1").await;
    claim(&p, "in-1", hour + Duration::minutes(1), "in-1 again").await;
    claim(&p, "in-2", hour + Duration::minutes(2), "in-2").await;
    claim(&p, "in-3", hour + Duration::minutes(3), "in-3, over the cap").await;
    claim(&other, "in-4", hour + Duration::minutes(3), "in-4 on another phone").await;
    claim(&p, "in-2", hour + Duration::minutes(59), "in-2 again, capped hour").await;
    claim(&p, "in-5", hour + Duration::hours(1), "in-5, the next hour").await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_ledger_claims_confirmations_as_the_adapter_does() {
    let t0 = base();
    let p = tocsin_tests::Pipeline::start().await;
    let emulator = confirmations_contract(&p.ledger, t0).await;
    let ledger = SimLedger { sim: sim_world(), shards: 16 };
    let sim = block_on(confirmations_contract(&ledger, t0));
    assert_same("confirmations", &sim, &emulator);
    assert_eq!(
        emulator,
        vec![
            "in-1 => Ok(Claimed)",
            "in-1 again => Ok(AlreadyClaimed)",
            "in-2 => Ok(Claimed)",
            "in-3, over the cap => Ok(Capped)",
            "in-4 on another phone => Ok(Claimed)",
            "in-2 again, capped hour => Ok(AlreadyClaimed)",
            "in-5, the next hour => Ok(Claimed)",
        ]
    );
}

/// A claim whose answer is lost after it landed, and which the SDK sends again, is found to be
/// the caller's own (never "claimed by someone else"): on AWS the retry meets its own write.
async fn lost_claim_answer_contract<L: Ledger>(l: &L, t0: DateTime<Utc>) -> String {
    let r = intent(40, "+12065550104", t0, 10);
    l.put_new(&r, t0).await.expect("put");
    line(
        "claim, answer lost and retried",
        l.claim(&r.intent.key, "mine", t0, t0 + Duration::minutes(2)).await.map(|o| match o {
            ClaimOutcome::Claimed(r) => format!("claimed by {:?}", r.status.attempt_id),
            other => format!("{other:?}"),
        }),
    )
}

/// A change carried on the intent whose answer is lost, and which the SDK sends again: the retry
/// meets its own write and counts it as applied; the observation is read once, from the intent.
async fn carried_answer_lost_contract<L: Ledger>(l: &L, t0: DateTime<Utc>, lose_next_answer: impl Fn()) -> Vec<String> {
    let mut out = Vec::new();
    let r = intent(41, "+12065550105", t0, 10);
    let key = r.intent.key.clone();
    l.put_new(&r, t0).await.expect("put");
    let mut t = transition(
        &key,
        vec![State::Received],
        StatusPatch { state: Some(State::Stale), ..Default::default() },
        obs("log:cut", t0, ObservationKind::DelaySuspected, Some(State::Stale)),
        Commit::Carried,
    );
    t.next_check = NextCheck::Remove;
    lose_next_answer();
    out.push(line("carried, answer lost and retried", l.transition(t.clone()).await));
    out.push(line(
        "observations",
        l.observations(&key).await.map(|os| os.iter().map(|o| o.id.clone()).collect::<Vec<_>>()),
    ));
    out.push(line("retried by the caller", l.transition(t).await));
    out.push(line("state", l.get(&key).await.map(|r| r.map(|r| r.status.state))));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_same_faults_the_simulated_ledger_answers_as_the_adapter_does() {
    use tocsin_harness::fault_proxy::{Fault as ProxyFault, Rule};
    let t0 = base();
    let p =
        tocsin_tests::Pipeline::start_with(tocsin_tests::Options { fault_seed: Some(7), ..Default::default() }).await;
    let proxy = p.proxy.as_ref().expect("a fault proxy");
    proxy.add_rule(Rule::once("DynamoDB_20120810.UpdateItem", ProxyFault::DropResponse).when_body_contains("\"mine\""));
    let emulator_claim = lost_claim_answer_contract(&p.ledger, t0).await;
    proxy.clear_rules();
    let emulator_cut = carried_answer_lost_contract(&p.ledger, t0, || {
        proxy.add_rule(
            Rule::once("DynamoDB_20120810.UpdateItem", ProxyFault::DropResponse).when_body_contains("log:cut"),
        );
    })
    .await;

    let sim = sim_world();
    let ledger = SimLedger { sim: sim.clone(), shards: 16 };
    sim.lock().world.force("DynamoDB UpdateItem (claim)", Verdict::Fault(Fault::Retried));
    let sim_claim = block_on(lost_claim_answer_contract(&ledger, t0));
    let sim_cut = block_on(carried_answer_lost_contract(&ledger, t0, || {
        sim.lock().world.force("DynamoDB UpdateItem (transition)", Verdict::Fault(Fault::Retried));
    }));

    assert_eq!(sim_claim, emulator_claim);
    assert_same("carried, answer lost", &sim_cut, &emulator_cut);
    assert_eq!(
        emulator_cut,
        vec![
            "carried, answer lost and retried => Ok(AlreadyApplied)",
            "observations => Ok([\"log:cut\"])",
            "retried by the caller => Ok(AlreadyApplied)",
            "state => Ok(Some(Stale))",
        ]
    );
}

/// CloudWatch Logs ingests before a search finds: an event written a moment ago is not found, the
/// same event is once ingested — in the simulated world (each event's `searchable_at`) and on the
/// emulator (`LogsShape::ingestion_delay`) alike, through the End User Messaging event search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_event_is_found_by_a_search_only_once_ingested_in_the_world_and_on_the_emulator() {
    use tocsin::adapters::eum::EumEventSearch;
    use tocsin::domain::reconcile::Window;
    use tocsin::domain::send_context::{ATTEMPT, KEY, STACK};
    use tocsin::ports::{DeliveryLogSearch, SearchFor};
    use tocsin_harness::LogsShape;
    use tocsin_sim::world::logs::{Group, SimEventSearch};

    let t0 = Utc::now();
    let producer = ProducerName::parse("monitoring").expect("producer");
    let key = IdempotencyKey::derive(&producer, "contract:ingest", &intent(0, "+12065550101", t0, 10).intent.template);
    let to = PhoneNumber::parse("+12065550101").expect("number");
    let message = serde_json::json!({
        "eventType": "TEXT_DELIVERED", "eventVersion": "1.0", "eventTimestamp": t0.timestamp_millis(),
        "isFinal": true, "originationPhoneNumber": "+18335550001", "destinationPhoneNumber": to.expose(),
        "isInternationalSend": false, "isoCountryCode": "US", "mcc": "310", "mnc": "001",
        "carrierName": "Contract Carrier", "messageId": "contract-ingest-1",
        "messageRequestTimestamp": t0.timestamp_millis(), "messageEncoding": "GSM", "messageType": "TRANSACTIONAL",
        "messageStatus": "DELIVERED", "messageStatusDescription": "Message has been delivered to the handset",
        "context": { STACK: "tocsin-local", KEY: key.as_str(), ATTEMPT: "a1" },
        "totalMessageParts": 1, "totalMessagePrice": 0.00581, "totalCarrierFee": 0.00266,
    })
    .to_string();
    let window = Window { from: t0 - Duration::minutes(1), to: t0 + Duration::minutes(1) };
    let what = SearchFor { recipient: &to, key: &key, digest: None };

    let p = tocsin_tests::Pipeline::start_with(tocsin_tests::Options::end_user_messaging()).await;
    let group = p.stack.log_group("SmsEventLogGroup").to_owned();
    let hidden = LogsShape { ingestion_delay: std::time::Duration::from_secs(600), ..LogsShape::default() };
    p.emulator.shape_logs(hidden).await.expect("shape");
    p.put_log(&group, &message).await;
    let search =
        EumEventSearch::new(aws_sdk_cloudwatchlogs::Client::new(&p.emulator.sdk_config().await), group, "tocsin-local");
    let found = |r: Result<Vec<tocsin::domain::reconcile::Found>, _>| r.map(|f| f.len()).map_err(|e| format!("{e:?}"));
    let mut emulator = vec![line("search before ingestion", found(search.records_for(what, window, 10).await))];
    p.emulator.shape_logs(LogsShape::default()).await.expect("shape");
    emulator.push(line("search once ingested", found(search.records_for(what, window, 10).await)));

    let sim = sim_world();
    {
        let mut st = sim.lock();
        let at = to_ms(t0);
        let searchable_at = st.core.now + 60_000;
        st.world.logs.write(Group::Events, message.clone(), at, searchable_at);
    }
    let search = SimEventSearch { sim: sim.clone(), stack: "tocsin-local".into() };
    let mut simulated = vec![line("search before ingestion", found(block_on(search.records_for(what, window, 10))))];
    sim.lock().core.now += 61_000;
    simulated.push(line("search once ingested", found(block_on(search.records_for(what, window, 10)))));

    assert_eq!(emulator[1], "search once ingested => Ok(1)", "the emulator's search finds it: {emulator:?}");
    assert_same("log search", &simulated, &emulator);
}

/// The chain contract (issue 37): a level starts once and never moves back; an acknowledgement of
/// the root refuses every later start and tells who has it; a missing root says so; a delivered
/// level of a chain can be leased (nobody acknowledged it), a delivered plain alert cannot; a
/// change presumed on a plain alert is refused on a chained one.
async fn chain_contract<L: Ledger + ChainLedger>(l: &L, t0: DateTime<Utc>) -> Vec<String> {
    use tocsin::domain::acknowledgement::AckVia;
    use tocsin::services::acknowledging::acknowledge_alert;
    let mut out = Vec::new();
    let mut chained = intent(70, "+12065550190", t0, 10);
    let root = chained.intent.key.clone();
    let spec = tocsin::domain::chain::parse_chain(
        &serde_json::json!({"wait": "5m", "then": [{"to": "+12065550191", "wait": "5m"}]}),
        Some(&chained.intent.recipient),
    )
    .expect("chain");
    chained.intent.chain = Some(tocsin::domain::chain::Chain {
        root: root.clone(),
        level: 0,
        levels: spec.levels,
        spec: spec.spec,
        policy: None,
    });
    out.push(line("start a missing root's level", l.start_level(&root, 1, t0, "r1").await));
    l.put_new(&chained, t0).await.expect("put");
    out.push(line("start level 1", l.start_level(&root, 1, t0, "carrier degraded").await));
    out.push(line("start level 1 again", l.start_level(&root, 1, t0, "its wait ended").await));
    out.push(line("start level 0 (back)", l.start_level(&root, 0, t0, "its wait ended").await));
    out.push(line("start level 2", l.start_level(&root, 2, t0, "failed").await));
    out.push(line("start level 1 after level 2", l.start_level(&root, 1, t0, "its wait ended").await));
    // Delivered, nobody acknowledged: the sweep may lease it; a plain delivered alert not.
    let plain = intent(71, "+12065550192", t0, 10);
    l.put_new(&plain, t0).await.expect("put");
    for (what, key) in [("chained", &root), ("plain", &plain.intent.key)] {
        let mut t = transition(
            key,
            vec![State::Received],
            StatusPatch { state: Some(State::Delivered), ..Default::default() },
            obs(&format!("log:{what}"), t0, ObservationKind::DelaySuspected, Some(State::Delivered)),
            Commit::Atomic,
        );
        t.expect = Expect { unchained: true, ..Default::default() };
        out.push(line(
            &format!("{what}: delivered, presumed unchained"),
            l.transition(t.clone()).await.map(|o| matches!(o, TransitionOutcome::Applied)),
        ));
        t.expect = Expect::default();
        let _ = l.transition(t).await;
        let leased = l.lease_escalation(key, "run", t0, t0 + Duration::minutes(1)).await;
        out.push(line(&format!("{what}: lease when delivered"), leased.map(|r| r.map(|r| r.status.state))));
    }
    let ack = acknowledge_alert(l, &root, "dana", AckVia::Operator, "r1", t0).await.map_err(|e| e.to_string());
    out.push(line("ack the root", ack.is_ok()));
    out.push(line(
        "start level 3 after the ack",
        l.start_level(&root, 3, t0, "its wait ended").await.map(|s| match s {
            LevelStart::Acknowledged(a) => format!("acknowledged by {}", a.by),
            other => format!("{other:?}"),
        }),
    ));
    out.push(line("root's level", l.get(&root).await.map(|r| r.and_then(|r| r.status.chain_level))));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_ledger_arbitrates_a_chain_as_the_adapter_does() {
    let t0 = base();
    let p = tocsin_tests::Pipeline::start().await;
    let emulator = Box::pin(chain_contract(&p.ledger, t0)).await;
    let ledger = SimLedger { sim: sim_world(), shards: 16 };
    let sim = block_on(Box::pin(chain_contract(&ledger, t0)));
    assert_same("chains", &sim, &emulator);
    assert_eq!(
        emulator,
        vec![
            "start a missing root's level => Ok(Missing)",
            "start level 1 => Ok(Started)",
            "start level 1 again => Ok(StartedBefore { reason: Some(\"carrier degraded\") })",
            "start level 0 (back) => Ok(StartedBefore { reason: None })",
            "start level 2 => Ok(Started)",
            "start level 1 after level 2 => Ok(StartedBefore { reason: Some(\"carrier degraded\") })",
            "chained: delivered, presumed unchained => Ok(false)",
            "chained: lease when delivered => Ok(Some(Delivered))",
            "plain: delivered, presumed unchained => Ok(true)",
            "plain: lease when delivered => Ok(None)",
            "ack the root => true",
            "start level 3 after the ack => Ok(\"acknowledged by dana\")",
            "root's level => Ok(Some(2))",
        ]
    );
}
