//! The oracle: what really happened, watched from outside the handlers — every SMS that left the
//! account and the alerts it covered, every state the ledger held, every escalation sent — and
//! the guarantees (`docs/invariants.md`) checked against it, as each event happens and once the
//! world is quiet.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use tocsin::domain::intent::IntentRecord;
use tocsin::domain::observation::{Observation, ObservationKind};
use tocsin::domain::{IdempotencyKey, PhoneNumber, State};
use tocsin::ports::{DigestRecord, EscalationMessage, SuppressionEvidence};

use crate::exec::{Millis, to_ms};

/// A guarantee that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub at: Millis,
    pub invariant: Invariant,
    pub key: Option<String>,
    pub detail: String,
}

/// The guarantees, as checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// At most one SMS per alert (a digest counts for each member), operator resends aside.
    AtMostOneSms,
    /// States only move forward; final states absorb.
    Monotonic,
    /// Every state an intent rests in is explained by an observation; every claim's attempt ends
    /// in an observation.
    Explained,
    /// A delivered alert is never escalated.
    DeliveredNeverEscalated,
    /// Every alert not delivered by its deadline is escalated.
    UndeliveredEscalated,
    /// Escalated once (a second message only where the first was never marked: counted).
    EscalatedOnce,
    /// A digest's outcome reaches every member.
    DigestFate,
    /// Nothing is forgotten: at quiescence every intent is final or escalated, none `sending`.
    NothingStuck,
    /// Nothing is lost between the ledger and the queue: a queued intent has a message.
    NothingLost,
    /// A permanent failure suppresses the number before its status invocation ends (by the next
    /// sweep when the record overtook the sender's MessageId write and was kept as an orphan);
    /// nothing is sent to a number suppressed before the attempt began.
    Suppression,
    /// A sent SMS is never forgotten: the ledger never says "not sent" for an alert an SMS covered.
    SentRemembered,
    /// The ledger says delivered only for an alert an SMS carried, and applies to an alert only
    /// the delivery records of the SMS that carried it: a record of another sender's SMS to the
    /// same phone (another application, another stack) is never taken for its own.
    NoFalseDelivery,
    /// Every item expires.
    Expires,
    /// The stack's SMS breaker holds: no UTC hour carries more than `SmsPartsPerHour` parts of the
    /// stack's own sends (beyond what was in flight at the hour's turn), and once it opened
    /// nothing more leaves but what was already counted and in flight (operator resends aside).
    BreakerHolds,
    /// Late is said early: an alert that can no longer make its deadline — its SMS failed, its
    /// number suppressed, or it was found past sending — is escalated within the same bound of
    /// that moment as an undelivered alert is of its deadline, not merely by its deadline.
    LateSaidEarly,
    /// Every stored observation tells what happened: the state it says the intent was left in was
    /// held, the move it says a record made was made (from that state, to that one), and the
    /// attempt it names claimed this intent.
    ObservationsTrue,
    /// An acknowledged alert is never escalated after the acknowledgement — but by a sweep that
    /// had leased it before (its decision made on the alert as it was then; the message it sends
    /// within its lease is the one documented race).
    AcknowledgedNeverEscalated,
    /// An escalation chain walks its levels once each, in order, each started within the bound
    /// of the moment its level stopped waiting; none starts after the chain was acknowledged;
    /// one nobody acknowledged ends with on-call paged.
    ChainWalked,
    /// A reply acknowledges only what its phone received before it was sent: an alert whose SMS
    /// (alone or in a digest) reached that handset, or the chain such an alert is a level of.
    RepliesReachOnlyWhatArrived,
    /// A reply is answered at most once, however often SNS and SQS deliver it.
    ConfirmedOnce,
    /// A carrier judged degraded by every application's traffic has a reason in the world — its
    /// network held the SMS, or the traffic to it changed shape — and the verdict clears within
    /// a stated bound once that ended: [`crate::invariants::CARRIER_RECOVERED_CLEARS_MS`] after
    /// the network recovers, [`crate::invariants::TRAFFIC_RESHAPED_CLEARS_MS`] after the change.
    CarrierVerdictClears,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{} ms] {:?}", self.at, self.invariant)?;
        if let Some(k) = &self.key {
            write!(f, " {}", &k[..12.min(k.len())])?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What happened to one intent (its current life).
#[derive(Debug, Clone, Default)]
pub struct Truth {
    pub created: Millis,
    pub deadline: Millis,
    pub recipient: String,
    /// Every state the ledger held, with when.
    pub states: Vec<(Millis, State)>,
    pub delivered_at: Option<Millis>,
    /// SMS that covered it: (when, by an operator's resend).
    pub sms: Vec<(Millis, bool)>,
    /// The message ids of the SMS that covered it: the only ones whose records are its own.
    pub sms_ids: BTreeSet<String>,
    pub escalations: Vec<Millis>,
    pub marked: Option<Millis>,
    pub leases: Vec<Millis>,
    /// Escalation leases taken: when, and until when they hold the intent against every other
    /// run (a run that crashed or lost the answer holds it that long, by design).
    pub lease_untils: Vec<(Millis, Millis)>,
    /// When an acknowledgement reached the ledger.
    pub acknowledged_written: Option<Millis>,
    /// Its place among everything the oracle recorded: two writes of one millisecond are still
    /// in the order the ledger made them.
    pub acknowledged_seq: Option<u64>,
    /// Writes whose due-index entry showed later than the write: (written, visible).
    pub due_index_behind: Vec<(Millis, Millis)>,
    /// Attempts that claimed it, with when.
    pub attempts: BTreeMap<String, Millis>,
    /// Each claim as it reached the ledger and as its sender timed it (its `claimed_at`, a moment
    /// before): a later claim overwrites the ledger's, so the earlier ones are kept here.
    pub claim_times: Vec<(Millis, Millis)>,
    /// When delivery records settled it (their observations' times).
    pub receipts: Vec<Millis>,
    /// Attempts an observation names.
    pub explained_attempts: BTreeSet<String>,
    pub observed_states: BTreeSet<State>,
    /// Escalations sent again after an earlier one was never marked (the documented case).
    pub duplicate_escalations: u32,
    /// Its place in an escalation chain (issue 37), if it names one.
    pub chain: Option<ChainPlace>,
    /// On a chain's root: the levels started, with when (`ChainLedger::start_level`).
    pub chain_starts: Vec<(u8, Millis)>,
    /// Each start's place among everything the oracle recorded (beside `chain_starts`).
    pub chain_start_seqs: Vec<u64>,
}

/// Where an intent stands in its escalation chain.
#[derive(Debug, Clone)]
pub struct ChainPlace {
    pub root: IdempotencyKey,
    pub level: u8,
    pub levels: usize,
    pub wait_ms: Millis,
}

#[derive(Default)]
pub struct Oracle {
    pub intents: BTreeMap<IdempotencyKey, Truth>,
    /// How many chain starts and acknowledgements it has recorded: their order within a millisecond.
    seq: u64,
    /// Confirmation SMS per reply (`inboundMessageId`).
    pub confirmations: BTreeMap<String, u32>,
    /// The alerts by their text: a chain's levels share their root's text, each to its own phone.
    bodies: HashMap<String, Vec<IdempotencyKey>>,
    digests: BTreeMap<String, Vec<IdempotencyKey>>,
    /// The digests whose SMS went out: their members, by ref.
    pub sent_digests: BTreeMap<String, Vec<IdempotencyKey>>,
    pub suppressed: BTreeMap<String, Millis>,
    /// The sweeps that ran clean (complete, no intent's work failed, no escalation left to another
    /// run's lease): when each started and
    /// returned. The escalation of an alert past its deadline is owed by the second of them to
    /// start after it (a fault plan can fail every sweep for many minutes).
    pub clean_sweeps: Vec<(Millis, Millis)>,
    /// The carriers each sweep's carrier view judged degraded by every application's traffic
    /// (only the runs that judged one), with when the run returned.
    pub carrier_verdicts: Vec<(Millis, CarrierVerdict)>,
    /// Other senders' SMS whose records reach this stack's tallies as another application's, by
    /// network and the minute they were sent: `[steady traffic, a second stack's alerts]` (the
    /// second stack's SNS records: nothing in them says a tocsin stack sent them).
    pub others_sms: BTreeMap<(usize, Millis), [u32; 2]>,
    /// Every number suppressed at some point (a re-enable takes it out of `suppressed` only).
    pub ever_suppressed: std::collections::BTreeSet<String>,
    /// The escalation caps' notices paged: (producer, start of the UTC hour, epoch ms).
    pub cap_notices: BTreeSet<(String, Millis)>,
    pub violations: Vec<Violation>,
    pub sms_sent: u64,
    pub escalations_sent: u64,
    pub duplicate_escalations: u64,
    /// Status batches Lambda gave up on (parked on the status-failures queue: on-call is paged).
    pub parked_batches: u64,
    pub parked_records: BTreeSet<String>,
}

pub(crate) fn attempt_of(o: &Observation) -> Option<&str> {
    match &o.kind {
        ObservationKind::Claimed { attempt_id, .. }
        | ObservationKind::Accepted { attempt_id, .. }
        | ObservationKind::PublishRetryable { attempt_id, .. }
        | ObservationKind::Deferred { attempt_id, .. }
        | ObservationKind::PublishRejected { attempt_id, .. }
        | ObservationKind::SendUnknown { attempt_id, .. } => Some(attempt_id),
        // `attempt:<attempt id>:<what>`; an operator's attempt id has a colon of its own.
        _ => o.id.strip_prefix("attempt:").and_then(|r| r.rsplit_once(':')).map(|(attempt, _)| attempt),
    }
}

impl Oracle {
    fn violate(&mut self, at: Millis, invariant: Invariant, key: Option<&IdempotencyKey>, detail: String) {
        self.violations.push(Violation { at, invariant, key: key.map(ToString::to_string), detail });
    }

    pub fn intent_created(&mut self, now: Millis, record: &IntentRecord) {
        let i = &record.intent;
        let same_text = self.bodies.entry(i.body.expose().to_owned()).or_default();
        if !same_text.contains(&i.key) {
            same_text.push(i.key.clone());
        }
        // A key's second life starts a new truth.
        self.intents.insert(
            i.key.clone(),
            Truth {
                created: now,
                deadline: to_ms(i.deadline),
                recipient: i.recipient.expose().to_owned(),
                chain: i.chain.as_ref().map(|c| ChainPlace {
                    root: c.root.clone(),
                    level: c.level,
                    levels: c.levels.len(),
                    wait_ms: i64::try_from(c.wait().as_millis()).unwrap_or(i64::MAX),
                }),
                ..Default::default()
            },
        );
    }

    pub fn intent_written(
        &mut self,
        now: Millis,
        before: Option<State>,
        after: State,
        record: &IntentRecord,
        by: &str,
    ) {
        let key = &record.intent.key;
        let operator = record.status.attempt_id.as_deref().is_some_and(|a| a.starts_with("operator:"));
        if let Some(before) = before
            && before != after
        {
            let back = after.rank() < before.rank();
            let released = before == State::Sending && after == State::Queued;
            let resent = operator && after == State::Sending;
            if (before.is_final() || back) && !released && !resent {
                self.violate(now, Invariant::Monotonic, Some(key), format!("{before} -> {after} (by {by})"));
            }
        }
        let Some(t) = self.intents.get_mut(key) else { return };
        if t.states.last().map(|(_, s)| *s) != Some(after) {
            t.states.push((now, after));
        }
        if after == State::Delivered && t.delivered_at.is_none() {
            t.delivered_at = Some(now);
        }
    }

    /// `attempt` claimed the intent, its write reaching the ledger `now`, timed by its sender at
    /// `timed`.
    pub fn claimed(&mut self, now: Millis, key: &IdempotencyKey, attempt: &str, timed: Millis) {
        if let Some(t) = self.intents.get_mut(key) {
            t.attempts.entry(attempt.to_owned()).or_insert(now);
            t.claim_times.push((now, timed));
        }
    }

    pub fn observation_written(&mut self, now: Millis, key: &IdempotencyKey, o: &Observation) {
        let Some(t) = self.intents.get_mut(key) else { return };
        if let Some(s) = o.state_after {
            t.observed_states.insert(s);
        }
        if let Some(a) = attempt_of(o) {
            t.explained_attempts.insert(a.to_owned());
        }
        let mut foreign = None;
        if let ObservationKind::DeliveryStatus { sns_message_id, effect, .. } = &o.kind {
            if matches!(effect, tocsin::domain::state::ReceiptEffect::Moved { .. }) {
                t.receipts.push(to_ms(o.at));
            }
            // A record is an alert's only when the SMS it reports carried that alert.
            if !t.sms_ids.contains(sns_message_id) {
                foreign = Some(format!(
                    "the record of message {sns_message_id} was applied ({}), but that SMS never carried this alert",
                    o.summary()
                ));
            }
        }
        if let ObservationKind::Operator { action, .. } = &o.kind
            && action == "resend"
            && let Some(a) = o.id.strip_suffix(":resend")
        {
            t.attempts.entry(a.to_owned()).or_insert(to_ms(o.at));
        }
        if let Some(detail) = foreign {
            self.violate(now, Invariant::NoFalseDelivery, Some(key), detail);
        }
    }

    pub fn digest_recorded(&mut self, d: &DigestRecord) {
        self.digests.insert(d.id.short().to_owned(), d.members.clone());
    }

    /// The alerts an SMS to `to` covers: its own intent (the one with its text to that phone: a
    /// chain's levels share their root's text), or a digest's members (by the ref it prints).
    pub fn covered_by(&mut self, body: &str, to: &str) -> Vec<IdempotencyKey> {
        if let Some(r) =
            body.rsplit("(ref ").next().filter(|_| body.contains("(ref ")).and_then(|r| r.strip_suffix(')'))
            && let Some(members) = self.digests.get(r)
        {
            self.sent_digests.insert(r.to_owned(), members.clone());
            return members.clone();
        }
        let keys = self.bodies.get(body).cloned().unwrap_or_default();
        let to_phone: Vec<IdempotencyKey> =
            keys.iter().filter(|k| self.intents.get(*k).is_some_and(|t| t.recipient == to)).cloned().collect();
        if to_phone.is_empty() { keys } else { to_phone }
    }

    /// An SMS left the account. `operator` tells, per covered key, whether an operator's resend
    /// holds its claim.
    pub fn sms_left(
        &mut self,
        now: Millis,
        to: &PhoneNumber,
        message_id: &str,
        covered: &[(IdempotencyKey, bool, Option<Millis>)],
    ) {
        self.sms_sent += 1;
        if covered.is_empty() {
            self.violate(
                now,
                Invariant::AtMostOneSms,
                None,
                format!("an SMS to {} covers no known alert", to.masked()),
            );
        }
        for (key, operator, claimed_at) in covered {
            let suppressed_before_claim =
                self.suppressed.get(to.expose()).is_some_and(|since| claimed_at.is_some_and(|c| *since < c));
            if suppressed_before_claim {
                self.violate(
                    now,
                    Invariant::Suppression,
                    Some(key),
                    "sent to a number suppressed before the claim".into(),
                );
            }
            let Some(t) = self.intents.get_mut(key) else { continue };
            t.sms.push((now, *operator));
            t.sms_ids.insert(message_id.to_owned());
            let automatic = t.sms.iter().filter(|(_, op)| !op).count();
            if automatic > 1 && !operator {
                let n = t.sms.len();
                self.violate(now, Invariant::AtMostOneSms, Some(key), format!("SMS number {n} for this alert"));
            }
        }
    }

    /// A confirmation SMS answering reply `inbound` left.
    pub fn confirmation_sent(&mut self, now: Millis, inbound: &str) {
        let sent = self.confirmations.entry(inbound.to_owned()).or_default();
        *sent += 1;
        if *sent > 1 {
            let detail = format!("reply {inbound} answered {sent} times");
            self.violate(now, Invariant::ConfirmedOnce, None, detail);
        }
    }

    /// An acknowledgement reached the ledger (its `at` is when it was made; the write may land
    /// later: a sweep that leased the alert in between decided on it unacknowledged).
    pub fn acknowledgement_written(&mut self, now: Millis, key: &IdempotencyKey) {
        let seq = self.next_seq();
        if let Some(t) = self.intents.get_mut(key)
            && t.acknowledged_written.is_none()
        {
            t.acknowledged_written = Some(now);
            t.acknowledged_seq = Some(seq);
        }
    }

    pub fn escalation_leased(&mut self, now: Millis, key: &IdempotencyKey, until: Millis) {
        if let Some(t) = self.intents.get_mut(key) {
            t.leases.push(now);
            t.lease_untils.push((now, until));
        }
    }

    /// A write of the intent changed its due-index entry, which the index shows only at `visible`
    /// (GSIs lag; AWS promises no bound).
    pub fn due_index_behind(&mut self, key: &IdempotencyKey, now: Millis, visible: Millis) {
        if let Some(t) = self.intents.get_mut(key) {
            t.due_index_behind.push((now, visible));
        }
    }

    pub fn escalation_sent(&mut self, now: Millis, m: &EscalationMessage) {
        self.escalations_sent += 1;
        if m.producer_cap_reached
            && let Some(p) = &m.producer
        {
            // The hour the sweep counted in: the run's instant, which the message carries.
            self.cap_notices.insert((p.clone(), hour_ms(crate::exec::to_ms(m.escalated_at))));
        }
        let Ok(key) = IdempotencyKey::parse(&m.idempotency_key) else { return };
        let Some(t) = self.intents.get_mut(&key) else { return };
        t.escalations.push(now);
        let lease = t.leases.last().copied();
        let delivered_before_lease = t.delivered_at.zip(lease).is_some_and(|(d, l)| d < l);
        let marked = t.marked;
        let second = t.escalations.len() > 1;
        if second && marked.is_none() {
            t.duplicate_escalations += 1;
            self.duplicate_escalations += 1;
        }
        // A level of an escalation chain is paged when nobody acknowledged it, delivered or not.
        if delivered_before_lease && t.chain.is_none() {
            self.violate(now, Invariant::DeliveredNeverEscalated, Some(&key), format!("escalated: {}", m.reason));
        }
        if let Some(at) = marked {
            self.violate(
                now,
                Invariant::EscalatedOnce,
                Some(&key),
                format!("escalated again; marked escalated at {at}"),
            );
        }
    }

    /// An escalation recorded without a message of its own (its producer over its escalation
    /// cap): on-call must have been told first, by the cap's notice for that producer and hour.
    pub fn escalation_folded(&mut self, now: Millis, key: &IdempotencyKey, producer: Option<String>, at: Millis) {
        if !self.intents.contains_key(key) {
            return;
        }
        let hour = hour_ms(at);
        let told = producer.as_ref().is_some_and(|p| self.cap_notices.contains(&(p.clone(), hour)));
        if !told {
            self.violate(
                now,
                Invariant::UndeliveredEscalated,
                Some(key),
                format!("folded (producer {producer:?}) with no cap notice paged for its producer this hour"),
            );
        }
        let Some(t) = self.intents.get_mut(key) else { return };
        let marked = t.marked;
        t.escalations.push(now);
        if let Some(at) = marked {
            self.violate(now, Invariant::EscalatedOnce, Some(key), format!("folded again; marked escalated at {at}"));
        }
    }

    /// A level of an escalation chain started on its root.
    pub fn chain_level_started(&mut self, now: Millis, root: &IdempotencyKey, level: u8) {
        let seq = self.next_seq();
        if let Some(t) = self.intents.get_mut(root) {
            t.chain_starts.push((level, now));
            t.chain_start_seqs.push(seq);
        }
    }

    /// The next place in the order of what the oracle records.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A level of a chain was handed on to the next (its person texted, not paged): its
    /// escalation, sent and marked at once.
    pub fn escalation_handed_on(&mut self, now: Millis, key: &IdempotencyKey) {
        let Some(t) = self.intents.get_mut(key) else { return };
        t.escalations.push(now);
        if let Some(at) = t.marked {
            self.violate(
                now,
                Invariant::EscalatedOnce,
                Some(key),
                format!("handed on again; marked escalated at {at}"),
            );
        } else if let Some(t) = self.intents.get_mut(key) {
            t.marked = Some(now);
        }
    }

    pub fn escalation_marked(&mut self, now: Millis, key: &IdempotencyKey) {
        if let Some(t) = self.intents.get_mut(key)
            && t.marked.is_none()
        {
            t.marked = Some(now);
        }
    }

    pub fn suppressed(&mut self, now: Millis, number: &PhoneNumber, _evidence: &SuppressionEvidence) {
        self.suppressed.entry(number.expose().to_owned()).or_insert(now);
        self.ever_suppressed.insert(number.expose().to_owned());
    }

    pub fn re_enabled(&mut self, _now: Millis, number: &PhoneNumber) {
        self.suppressed.remove(number.expose());
    }

    pub fn violation(&mut self, at: Millis, invariant: Invariant, key: Option<&IdempotencyKey>, detail: String) {
        self.violate(at, invariant, key, detail);
    }
}

/// The start of the UTC hour `at` falls in (the escalation cap's window).
fn hour_ms(at: Millis) -> Millis {
    at - at.rem_euclid(3_600_000)
}

/// What one sweep's carrier view said of the traffic: the carriers it judged degraded by every
/// application's delivery records, and whether it judged every carrier slow (the delay is then
/// upstream of the carriers or in the logs' path: not one carrier's).
#[derive(Debug, Clone, PartialEq)]
pub struct CarrierVerdict {
    pub by_traffic: Vec<String>,
    pub all_slow: bool,
}

impl CarrierVerdict {
    /// The run's verdict, when it judged some carrier degraded by the traffic.
    pub fn of(summary: &escalation::RunSummary) -> Option<Self> {
        let by_traffic: Vec<String> =
            summary.degraded_carriers.iter().filter(|d| d.traffic).map(|d| d.carrier.clone()).collect();
        (!by_traffic.is_empty()).then(|| CarrierVerdict {
            by_traffic,
            all_slow: summary.carrier_classification == Some(tocsin::domain::carrier::Classification::AllCarriersSlow),
        })
    }
}
