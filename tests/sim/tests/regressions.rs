//! Seeds that found defects, kept as tests: each of these runs failed with the defect in the code
//! it was found on, and passes with its fix. The bound (`max_alerts`) is part of what a seed stands
//! for, so it is kept with it. A seed replays the same run only on the same code: a change that adds
//! or removes a port call changes every draw after it (seeds 10161 and 13698 no longer reach their
//! defect since the carrier view's calls). So each fix is pinned by a named emulator test too, and
//! these seeds stay as the scenarios that once exercised it. docs/testing.md ("The simulation")
//! lists each defect, its seed and its fix.

use tocsin_sim::world::sms::Provider;
use tocsin_sim::{Scenario, failure_report, run, shrink};

/// Through SNS, the provider these seeds were found on (a seed now also draws its provider).
fn green(seeds: &[u64], max_alerts: usize) {
    green_through(Provider::Sns, seeds, max_alerts);
}

/// Each seed green through `provider`, whichever the seed draws.
fn green_through(provider: Provider, seeds: &[u64], max_alerts: usize) {
    for &seed in seeds {
        let report = run(&Scenario::from_seed(seed, max_alerts).through(provider));
        if !report.ok() {
            panic!("{}", failure_report(&shrink(report)));
        }
    }
}

/// Issue 24's first named defect: sender A pulls X from the backlog into a digest and claims it;
/// sender B receives X's own message, finds X claimed and deletes the message as a duplicate; A
/// hands X back (throttled publish) and X is `queued` with no message until the sweep's late
/// re-enqueue. Fixed twice over: B keeps the message hidden until A's lease ends
/// (`Outcome::HeldElsewhere`), and A writes X a new message before handing it back
/// (`requeue_pulled`). With both fixes removed, these storm-mode "throttled account" seeds fail
/// with `NothingLost: queued with no message on any queue`.
#[test]
fn a_backlog_alert_handed_back_by_a_digest_keeps_a_queue_message() {
    green(&[21, 100, 174, 282, 317, 346], 80);
}

/// Found by the long mode: the sender records a lapsed lease in order (the fact, then the state)
/// and its state write never lands; the sweep's transaction for the same fact
/// (`lease:<attempt>:expired`) was refused as "already applied", so the intent stayed `sending`
/// for ever (`NothingStuck`). Fixed in `adapters/commit.rs`: an atomic transition whose fact is
/// already stored completes the state under its own conditions. Emulator test:
/// `a_lapsed_lease_the_sender_recorded_without_its_state_is_completed_by_the_sweep`.
#[test]
fn a_lapsed_lease_recorded_without_its_state_is_completed_by_the_sweep() {
    green(&[10161], 330);
}

/// Found by the long mode: an attempt's publish was accepted but its state write lost; the lease
/// lapsed to `send_unknown`, an operator resent, and the first SMS's delivery record then arrived
/// while the operator's attempt held the claim. It was applied as the current attempt's, so the
/// operator's own outcome was never recorded (`Explained`). Fixed in `services/receipts.rs`: a
/// record of a message SNS took before the current claim began is an earlier attempt's — stored,
/// never applied. Emulator test:
/// `an_earlier_attempts_receipt_arriving_during_an_operator_resend_never_settles_the_resend`.
#[test]
fn a_record_of_an_earlier_attempts_sms_never_settles_the_current_attempt() {
    green(&[13698], 330);
}

/// Found by the long mode: a digest's delivery record reached the digest and two members, and the
/// write to the third failed on every retry of the batch; the third learnt its digest's fate only
/// at its next check, days later (`DigestFate`). Fixed in the status function: every member still
/// waiting is brought forward in the sweep's index (`DueIndex::bring_check_forward`) before the
/// fate is recorded. Emulator test:
/// `a_digest_member_the_status_fan_out_never_reached_learns_the_digests_fate_at_the_next_sweep`.
#[test]
fn a_digest_member_the_fan_out_never_reached_still_learns_its_fate() {
    green(&[10137], 330);
}

/// Found by the long mode: the sweep's log search for one member of a digest whose publish answer
/// was lost found the digest's record, but the search's time limit also cut the writes after it;
/// one member was delivered and its siblings stayed `send_unknown` past the run (`DigestFate`).
/// Fixed in the escalation function: only the search is bounded. Emulator test:
/// `a_digest_reconciled_from_the_logs_settles_every_member_even_when_a_write_is_slow`.
#[test]
fn a_digest_reconciled_from_the_logs_is_settled_for_every_member() {
    green(&[10658], 330);
}

/// Found by the long mode: unknown outcomes were searched in the due-index's order, and a run
/// stops searching at its first throttled search; under steady throttling one digest member that
/// the index always listed last was never searched while its siblings were settled
/// (`DigestFate`). Fixed in the escalation function: each run draws the order of its searches
/// (unit test `every_unknown_outcome_is_searched_first_in_some_run_whatever_the_index_order`);
/// the run's calm after the storm now settles this seed with or without that fix.
#[test]
fn an_unknown_outcome_listed_last_is_not_starved_by_throttled_searches() {
    green(&[20171], 330);
}

/// Found by the long mode: an alert escalated past its deadline has no next check; re-enqueued, it
/// was claimed, and the sender died before the separate write that indexes the lease's end, so it
/// stayed `sending` where no sweep looked (`NothingStuck`). Fixed in the ledger adapter's claim:
/// an intent with no next check gets the lease's end in the claim's own write. Emulator test:
/// `a_sender_that_dies_right_after_claiming_an_intent_with_no_next_check_leaves_it_to_the_sweep`.
#[test]
fn a_claimed_intent_with_no_next_check_is_never_left_sending() {
    green(&[24286], 330);
}

/// Found by the long mode once the invariant `NoFalseDelivery` was added (an alert no SMS carried
/// is never `delivered`): an alert whose publish never went out took the record of another
/// alert's SMS to the same number — found by number and time, tied to no alert because that
/// alert's outcome was unknown too (its answer lost), or because an operator had resent it since.
/// Fixed first with rivals (an SMS another alert could own was not taken), then for good: no
/// record nothing ties to an alert — by the message index, or a digest sibling's recorded answer —
/// is taken for its own, whoever else texts the number. Emulator tests (`reconcile.rs`):
/// `another_senders_sms_to_the_same_phone_never_makes_an_alert_never_sent_delivered`,
/// `an_operators_resend_to_the_same_number_is_never_taken_for_an_alert_never_sent`, and
/// `a_resent_alerts_first_sms_is_never_taken_for_another_alerts_to_the_same_number` (CLI).
#[test]
fn an_alert_never_sent_is_never_called_delivered_on_another_alerts_sms() {
    green(&[40052, 40215, 40261, 40419, 40806, 55909], 330);
}

/// Found by the long mode (seed 50776): the sweep reconciled a digest member from the logs and
/// applied the record to every member; one member, `accepted` (its own write of SNS's answer had
/// landed), missed it when its write failed, and with no search of its own and its next check
/// days away, stayed `accepted` while its siblings were failed. Reconciliation now records the
/// digest's fate on the digest and brings its waiting members forward first, as the status
/// function does. Emulator test:
/// `a_digest_member_a_reconciled_fan_out_did_not_reach_learns_the_fate_at_the_next_sweep`.
#[test]
fn a_digest_member_a_reconciled_fan_out_missed_still_learns_its_fate() {
    green(&[50776], 330);
}

/// Found by the long mode (seeds 81868, 82175): a permanent failure overtook the sender's slow
/// MessageId write by more than `TOCSIN_ORPHAN_WAIT` and was kept as an orphan that nothing read
/// back — the alert was escalated as carrier-silent instead of failed and the dead number never
/// suppressed. The sweep now reads a silent accepted intent's orphans back and applies them before
/// it suspects a delay (`orphaned_fate`). Both seeds fail the quiescence check
/// (`invariants::orphans_applied`) without it. Emulator test:
/// `a_record_that_overtook_the_senders_message_id_write_is_applied_by_the_next_sweep`.
#[test]
fn a_record_that_overtook_the_senders_write_still_suppresses_the_dead_number() {
    green(&[81868, 82175], 330);
}

/// Found by the long mode once the quiescence check above was added (seeds 90558, 90891, 91043):
/// the sweep's reconciliation applied a permanent failure to an unknown outcome, and the registry
/// write that came after the state write failed, or the state write's answer was lost. The intent
/// had left `send_unknown`, so no later search tried the record again, and the dead number stayed
/// enabled. A record's suppression now comes before its state write (`services/receipts.rs`).
/// Emulator test:
/// `a_reconciled_permanent_failure_suppresses_the_number_even_when_the_state_writes_answer_is_lost`.
#[test]
fn a_reconciled_permanent_failure_suppresses_the_number_whatever_becomes_of_the_state_write() {
    green(&[90558, 90891, 91043], 330);
}

/// Found by the long mode (seed 101905): a digest's publish answer was lost and so were its
/// members' writes; its delivery record was logged half an hour after the SMS (a late receipt).
/// The sweep searched only the log events of the attempt's 15-minute window — a record is logged
/// when the carrier's receipt comes, up to 72 hours later — so it found nothing; it now searches
/// the logs until now and holds each record's own time to the window. Then one member, whose
/// siblings named no digest, was left to a human although the message index already tied the SMS
/// to it; such an SMS is now its own. Emulator tests:
/// `a_record_logged_long_after_its_sms_still_settles_an_unknown_outcome`,
/// `a_member_whose_sms_the_index_already_ties_to_it_is_settled_whatever_its_siblings_say`.
#[test]
fn a_late_logged_record_of_a_digest_reaches_every_member() {
    green(&[101905], 330);
}

/// Found when the world gained End User Messaging (its refusals): an operator's resend to a number
/// in the opt-out list was refused and recorded as `suppressed` by an observation whose id names
/// the attempt (`attempt:operator:<id>:rejected`), and the judge read the attempt id only up to
/// its first colon — so the operator's attempt looked unexplained (`Explained`). Fixed in the
/// oracle (`attempt_of`: the attempt id is all but the last segment). Runs through End User
/// Messaging whatever provider the seed draws.
#[test]
fn an_operators_refused_resend_is_explained_by_its_observation() {
    green_through(Provider::EndUserMessaging, &[180, 252, 314, 396], 200);
}

/// Found by the judge `ObservationsTrue` (issue 35's stricter judges; EUM seed 3): a status
/// invocation's state change landed with its answer lost, and Lambda's retry of the batch — which
/// presumes the alert `accepted` — found the change made by its own earlier try and stored *its*
/// observation, saying the record moved the alert `accepted → failed` where the ledger had moved
/// it `delay_suspected → failed`. Fixed in `shared/src/adapters/commit.rs`: the retry stored the
/// observation the earlier try carried on the intent (`moved_obs`); since 2026-12-07 the change
/// and its observation are one write (`Commit::Carried`) and the retry writes nothing. Runs
/// through End User Messaging.
#[test]
fn a_retry_that_meets_its_own_earlier_change_stores_the_move_that_was_made() {
    green_through(Provider::EndUserMessaging, &[3], 200);
}

/// Found by the long mode once Lambda throttling was in the world (issue 35, world item 5; SNS
/// seeds 1411 and 1568): a digest's message index write gave up at the sender's deadline, one
/// member recorded SNS's answer and the function ended before the others; a member that never
/// learnt its digest searched the logs and its sibling's message id counted only if indexed, so
/// it was escalated as unknown while its sibling was delivered (`DigestFate`). Fixed in
/// `functions/escalation/src/digest_members.rs` (`sibling_knows`: a message id nothing indexes is
/// the digest's when the sibling was not claimed again after the digest was made); emulator test
/// `storm_digest.rs`, `a_member_is_settled_from_its_siblings_record_of_the_sms_even_when_the_message_id_was_never_indexed`.
#[test]
fn a_digest_member_learns_its_fate_from_a_sibling_whose_message_id_was_never_indexed() {
    green(&[1411, 1568], 200);
}

/// Found by the long mode once Lambda throttling was in the world (End User Messaging seed 4833):
/// the sweep wrote its next look at an intent a whole period after writing it, just after the next
/// run's start, so that run skipped it; the run after failed and the next ones were throttled, and
/// the alert was escalated past promise 7's bound (`UndeliveredEscalated`). Fixed in
/// `functions/escalation/src/sweeping.rs` (`NEXT_CHECK_FLOOR_SECS`: 1 s) and `lib.rs` (a run
/// reads what was due when it started); emulator test `escalation.rs`,
/// `an_intent_due_after_a_run_is_escalated_by_the_next_run_even_one_starting_a_little_under_a_period_later`.
#[test]
fn an_intent_due_just_after_a_run_is_the_next_runs() {
    green_through(Provider::EndUserMessaging, &[4833], 200);
}

/// Issue 37's first defect the acknowledgement judge found: an alert someone had acknowledged was
/// still escalated early, its carrier degraded (the early escalation asked only whether the alert
/// was in flight). Without `escalating.rs`'s check these seeds fail `AcknowledgedNeverEscalated`
/// ("acknowledged at …, escalated at … by a lease taken after").
#[test]
fn an_acknowledged_alert_is_not_escalated_early_for_a_degraded_carrier() {
    green_through(Provider::EndUserMessaging, &[51, 106, 234], 200);
    green_through(Provider::Sns, &[204, 217], 200);
}

/// Found by the chain judge (issue 37) once chains were in the world: a level of a chain whose
/// send's outcome was unknown (`sending`, then `send_unknown`) waited for its deadline — up to 19
/// minutes past its wait — before the chain moved on (`ChainWalked`: "level 1 started … after the
/// bound"). Fixed in `domain::sweep::moves_on_at`: such a level's wait counts from its claim (if
/// the SMS left, it left then). Unit test:
/// `a_level_whose_send_outcome_is_unknown_moves_on_after_its_wait_from_the_claim_not_at_the_deadline`.
#[test]
fn a_chain_level_whose_send_outcome_is_unknown_moves_on_after_its_wait() {
    green(&[91043, 82175, 40052], 330);
}

/// Found by the reply judge (issue 37, `RepliesReachOnlyWhatArrived`) once the world's people
/// replied: "ACK ALL" acknowledged the members of a digest whose SMS never reached the phone (its
/// time to live ran out), because one member — handed back from the digest and sent since — was
/// delivered; the replies function judged a digest's arrival by its members' states. Fixed in
/// `functions/replies/src/acknowledging.rs`: a digest has arrived only when its own SMS's delivery
/// record (recorded on the digest) says so, 10 s (`READ_AND_REPLY`) before the reply arrived.
#[test]
fn ack_all_reaches_a_digest_only_when_its_own_sms_reached_the_phone() {
    green_through(Provider::EndUserMessaging, &[121510, 122994], 330);
}

/// Found by the long mode once templates' chains were in the world (End User Messaging): a
/// chain's level whose sender claimed it and died took the chain's acknowledgement while its
/// lease still held, and with it left the sweep — so the lapse was never recorded and the level
/// stayed `sending` for ever (`NothingStuck`). Fixed in `functions/escalation/src/chaining.rs`
/// (`take_chain_ack`): the level is never escalated again, but is swept until its own SMS's fate
/// is settled. Emulator test:
/// `chains::a_level_in_flight_when_the_chain_is_acknowledged_still_becomes_an_explicit_unknown_when_its_lease_lapses`.
#[test]
fn a_level_in_flight_when_its_chain_is_acknowledged_is_settled_when_its_lease_lapses() {
    green_through(Provider::EndUserMessaging, &[126138], 330);
}

/// Found by the long mode (SNS, seed 224): a chain's first level delivered a moment before its
/// deadline, its receipt written a moment after. The sweep rightly gave the person their wait from
/// the delivery; the judge had taken the deadline as the end of the wait and called the next
/// level late. The judge now bounds the start by the later of the two when the receipt was in the
/// ledger before the level moved on.
#[test]
fn a_receipt_written_after_the_deadline_of_a_delivery_before_it_gives_the_wait_from_delivery() {
    green(&[224], 200);
}

/// Found by the long mode (SNS seed 127064, storm to many, a fault that kept failing every
/// member's state write while the list-index lagged): a digest member found its SMS's record
/// through the index entry naming the digest, but, knowing no digest, settled itself alone and
/// narrowed the entry to itself; its siblings were escalated as unknown (`DigestFate`). Fixed in
/// `functions/escalation/src/reconciling.rs`: an SMS the index names as a digest's is that
/// digest's. Emulator test: `storm_digest::a_member_whose_sms_the_index_names_as_its_digests_settles_every_member_though_the_digest_is_not_listed_yet`.
#[test]
fn a_digests_sms_found_through_its_index_entry_settles_every_member() {
    green(&[127064], 330);
}

/// Found by the long mode (SNS seed 128945, storm to one): an operator resent one member of a
/// digest whose answer was lost, and a sweep that had read that member before the resend found the
/// resend's SMS tied to it and applied it to the whole digest — fourteen false deliveries
/// (`NoFalseDelivery`). Fixed in `functions/escalation/src/reconciling.rs`: an SMS the index ties
/// to a member alone settles that member alone. Emulator test:
/// `storm_digest::a_members_resend_found_by_a_search_that_read_it_before_the_resend_never_settles_its_siblings`.
#[test]
fn a_members_resend_never_settles_its_digests_siblings() {
    green(&[128945], 330);
}

/// Found by the long mode (SNS seed 129865, singles in storm mode, a function that kept
/// crashing): about 300 unknown outcomes were due, 10 searched per run, drawn at random; one was
/// never searched in 113 runs while its digest's sibling was delivered (`DigestFate`). Fixed in
/// `functions/escalation/src/reconciling.rs` (`longest_waiting_first`). Emulator test:
/// `reconcile::with_more_unknown_outcomes_due_than_a_run_searches_the_longest_waiting_goes_first`.
#[test]
fn no_unknown_outcome_is_starved_of_its_search() {
    green(&[129865], 330);
}

/// Found by the long mode (End User Messaging seed 129228, Lambda throttled for half an hour): an
/// alert failed by its carrier at its deadline owed its escalation while no sweep could run; an
/// operator resent it, and the resend's claim put its next check at the lease's end, so the first
/// sweeps that ran skipped it (`UndeliveredEscalated`, 59 s past the bound). Fixed in
/// `shared/src/services/operator.rs` (`resend_check`): a claim never postpones an escalation the
/// alert owes. Emulator test:
/// `escalation::an_operators_resend_of_an_alert_owing_its_escalation_does_not_postpone_it`.
#[test]
fn an_operators_resend_never_postpones_an_owed_escalation() {
    green_through(Provider::EndUserMessaging, &[129228], 330);
}

/// Found by the long mode with the carrier-verdict judge (SNS seed 131596, a throttled account;
/// End User Messaging seeds 131548 and 131791, storms to one person): tocsin's own storm to one
/// carrier's numbers taught the traffic baseline its rate, and the storm's end was judged that
/// carrier gone silent, with no incident and no change of the traffic (`CarrierVerdictClears`).
/// Fixed in `shared/src/domain/carrier_traffic.rs` and `functions/status/src/chunk.rs`: tocsin's
/// records (any stack's, by their context; this stack's, by its index) are tallied apart and
/// never set what a carrier is expected to deliver. Emulator tests:
/// `carriers::tocsins_own_delivery_records_are_tallied_apart_from_other_applications` (each provider).
#[test]
fn an_alert_storms_end_is_never_its_carrier_gone_silent() {
    green_through(Provider::Sns, &[131596], 330);
    green_through(Provider::EndUserMessaging, &[131548, 131791], 330);
}

/// Found by the long mode after observations were carried on the intent (End User Messaging seed
/// 135349): a chain level's first send ended `send_unknown`, an operator resent it, and no sweep
/// ran for half an hour after. The chain judge counted the level's wait from the first attempt's
/// claim; promise 19 (docs/invariants.md) and the sweep (`domain/sweep.rs`, `moves_on_at`) count
/// it from the resend's acceptance, which texted the person anew (`ChainWalked`, 731 s "after the
/// bound"). A judge defect, fixed in `tests/sim/src/invariants.rs` (`stopped_waiting`): from the
/// resend as the ledger held it when the next level started — seed 136926, where a level moved
/// on from its failure a moment before an operator's resend of it was written, keeps that start
/// judged against the failure.
#[test]
fn a_resent_levels_wait_counts_from_the_resend() {
    green_through(Provider::EndUserMessaging, &[135349, 136926], 330);
}

/// Found by the long mode after a number's carrier was written only when it is news (SNS seed
/// 142379): every carrier fell silent together, which degrades each of them, and a chain level
/// caught in it was moved on early, its reason "all carriers silent: …; at that delay this SMS
/// arrives after its deadline". Promise 19 allows that (its carrier is degraded); the chain judge
/// knew only a single carrier's reason ("carrier …"). A judge defect, fixed in
/// `tests/sim/src/invariants.rs` (`ChainWalked`'s early reasons).
#[test]
fn a_level_moved_on_early_when_every_carrier_fell_silent_is_moved_on_for_its_carrier() {
    green_through(Provider::Sns, &[142379], 330);
}

/// Found by the long mode (SNS seed 142759, sender crashes and crash streaks, storm mode on): a
/// chain level the sweep had re-enqueued (its next check then 23 minutes on) was claimed by a
/// sender that died before its second write, the one that brought the check to the lease's end.
/// The level sat `sending` until the old check, and the next level started 613 s after promise
/// 19's bound. A product defect: the claim itself now keeps the check no later than the lease's
/// end (`IntentStore::claim`, `shared/src/adapters/ledger/intents.rs`: a claim refused for a
/// later check is made again moving it), pinned on the emulator by
/// `sender::a_sender_dying_right_after_claiming_a_re_enqueued_intent_leaves_it_to_the_sweep_by_the_lease_end`
/// and the ledger contract (`tests/sim/tests/contract.rs`, "claim 5").
#[test]
fn a_sender_dying_right_after_its_claim_leaves_the_intent_checked_by_the_lease_end() {
    green_through(Provider::Sns, &[142759], 330);
}

/// Found by the long mode on stop 57's code (End User Messaging seed 150834 at 330 alerts, singles
/// in storm mode, lost writes and crashes): unknown outcomes whose search found only the
/// carrier's acceptance (no outcome yet) were never counted as searched, so they came first in
/// every run's batch of ten, and eight digest members behind them were never searched at all
/// (`DigestFate`). A search that settles nothing is now counted and waits its backoff
/// (`functions/escalation/src/settling.rs`); emulator test
/// `end_user_messaging::a_search_that_finds_only_the_carriers_acceptance_is_counted_and_waits_its_backoff`.
#[test]
fn a_search_that_finds_only_progress_waits_its_backoff_and_starves_no_other() {
    green_through(Provider::EndUserMessaging, &[150834], 330);
}

/// SNS long-mode seed 150546: a digest of seven's delivery record overtook the sender's MessageId
/// write and was kept as an orphan; the sweep applied it to five members at their own checks, but
/// two, escalated already and suspected late, had theirs three days away, long after the orphan is
/// forgotten: they never learned their SMS arrived. The first member the orphan reaches spreads it
/// to the digest (`functions/escalation/src/orphans.rs`); emulator test
/// `storm_digest::a_digests_record_kept_as_an_orphan_reaches_every_member_at_the_next_sweep`.
#[test]
fn a_digests_orphaned_record_reaches_every_member_not_only_those_checked_soon() {
    green_through(Provider::Sns, &[150546], 330);
}

/// SNS long-mode seed 151048 (a throttled account, an outage): the status function's index lookup
/// failed try after try, and every failed try of a batch tallied its records as other
/// applications'. US Cellular's baseline learnt three times its rate and then looked silent with
/// nothing wrong (`CarrierVerdictClears`). A batch's traffic is tallied once the batch has
/// succeeded (`functions/status/src/lib.rs`); emulator test
/// `carrier_traffic::a_batch_tried_again_after_a_failure_tallies_its_records_once_and_tocsins_as_tocsins`.
#[test]
fn a_batch_tried_again_tallies_its_traffic_once_and_no_carrier_looks_silent_for_it() {
    green_through(Provider::Sns, &[151048], 330);
}

/// SNS long-mode seed 151138, a judge defect: a chain level whose outcome was unknown was claimed
/// again later, which overwrote its first claim's time in the ledger; the judge then counted the
/// level's wait from the first claim's state write, a second after its sender timed it, and
/// found the next level started a second early (`ChainWalked`). The oracle keeps every claim's
/// time as its sender wrote it (`Truth::claim_times`).
#[test]
fn a_level_claimed_again_waits_from_its_first_claim_as_its_sender_timed_it() {
    green_through(Provider::Sns, &[151138], 330);
}

/// SNS long-mode seed 153928, a judge defect: an operator acknowledged a chain's root in the very
/// millisecond a sweep started its next level — the ledger started the level first (it refuses a
/// start on an acknowledged root) — and the judge, comparing milliseconds, called the start
/// "after the chain was acknowledged". The oracle now keeps the order of the two writes
/// (`Truth::acknowledged_seq`, `Truth::chain_start_seqs`).
#[test]
fn a_level_started_in_the_millisecond_its_chain_is_acknowledged_is_judged_in_the_ledgers_order() {
    green_through(Provider::Sns, &[153928], 330);
}

/// SNS long-mode seed 170134, a product defect: a sweep leased a chain's first level, whose send's
/// outcome was unknown, and decided to move on; while it was slow, an operator's resend claimed
/// the level and texted its person anew; the sweep then started the next level, which texted the
/// next person a second later — the level never waited from the resend (promise 19). A resend is
/// now refused while an escalation run holds the intent (`Expect::no_escalation_run_at`).
#[test]
fn a_resend_never_slips_between_a_sweeps_decision_and_the_chains_next_level() {
    green_through(Provider::Sns, &[170134], 330);
}

/// SNS long-mode seed 189177, a product defect: a sender's digest write landed with its answer
/// lost, so it handed its claims back unsent; 150 ms later another sender claimed some of those
/// alerts into a digest of its own, sent it, indexed its SMS and died before recording it on any
/// member. The sweep's search for a member took the first digest listed for the recipient in the
/// window — the unsent one, made just before the claim — over the digest the SMS's index entry
/// names, re-indexed the SMS to it and called its members delivered: seven alerts that SMS never
/// carried. The index entry (or an event's context) now decides an SMS's digest, and the guess by
/// time is the latest digest holding the member made at or after its claim.
#[test]
fn a_digest_never_sent_never_takes_the_sms_of_the_digest_its_members_went_out_in() {
    green_through(Provider::Sns, &[189177], 330);
}

/// SNS long-mode seed 227966, a product defect: a sender published an alert alone and stored SNS's
/// answer (its observation, written first), then its message-index write failed every try until
/// its invocation ended. The lapsed claim became `send_unknown`; the SMS's permanent failure, kept
/// as an orphan, found no index entry, and the sweep's searches left it unattributed, so the dead
/// number was never suppressed. The search now ties a record to the alert by the attempt's own
/// stored answer, as the index would have.
#[test]
fn an_sms_whose_index_write_never_landed_is_tied_by_its_attempts_stored_answer_and_its_failure_suppresses() {
    green_through(Provider::Sns, &[227966], 330);
}

/// End User Messaging long-mode seed 227992, a judge defect: an operator's resend was timed 870 ms
/// before its claim reached the ledger (a slow write); the sweep counted the level's wait from
/// the resend's claim as timed, the judge from its write, and called the next level early
/// (`ChainWalked`). The judge takes a resend's timed claim as it takes a sender's.
#[test]
fn a_level_resent_waits_from_the_resends_claim_as_the_operator_timed_it() {
    green_through(Provider::EndUserMessaging, &[227992], 330);
}
