//! BENCHMARKS.md section 9: storm mode, simulated (`storm_mode`).

use std::fmt::Write;

use crate::report::{Report, Row, error_line, verdict};
use crate::storm_mode::{self as sm, Mode, ModeRun, Reference, StormMode};

const TWO_MIN: &str = "2-min alerts";

/// `6.29 s`, or why there is no figure (the rank falls on an alert never delivered).
fn secs(ms: Option<i64>) -> String {
    ms.map(|m| format!("{:.2} s", m as f64 / 1000.0)).unwrap_or_else(|| "not delivered".into())
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mode_cells(r: &ModeRun) -> [String; 16] {
    [
        thousands(r.sms as u64),
        thousands(r.parts),
        thousands(r.covered as u64),
        if r.stranded == 0 {
            format!("{} ({} stale, {} late)", r.misses(), r.stale, r.late)
        } else {
            format!("{} ({} stale, of which {} stranded; {} late)", r.misses(), r.stale, r.stranded, r.late)
        },
        if r.mode == Mode::Off {
            format!("{} ({} then covered)", r.said_early, r.said_early_covered)
        } else {
            "— (no estimate)".into()
        },
        if r.urgent_lane {
            format!("{} ({} claimed from it; {} expired unread)", r.urgent_enqueued, r.urgent_claimed, r.urgent_expired)
        } else {
            "— (no lane)".into()
        },
        r.escalations().to_string(),
        secs(r.p50_two_min_ms),
        secs(r.p95_two_min_ms),
        secs(r.p95_longer_ms),
        if r.digests == 0 { "0".into() } else { format!("{} (largest {})", r.digests, r.largest_digest) },
        thousands(r.pulled as u64),
        format!("{} ({} then missed)", r.budget_held, r.budget_held_missed),
        r.over_budget.to_string(),
        r.max_sms_per_window.to_string(),
        format!("{:.1} s", r.finished_ms as f64 / 1000.0),
    ]
}

fn reference_cells(r: &Reference, alerts: usize) -> [String; 16] {
    let dash = || "—".to_string();
    [
        thousands(r.sms as u64),
        thousands(r.parts),
        thousands(alerts.saturating_sub(r.misses) as u64),
        r.misses.to_string(),
        dash(),
        dash(),
        r.misses.to_string(),
        secs(r.p50_two_min_ms),
        secs(r.p95_two_min_ms),
        secs(r.p95_longer_ms),
        dash(),
        dash(),
        dash(),
        dash(),
        dash(),
        dash(),
    ]
}

impl Report {
    pub(crate) fn storm_mode_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 9. Storm mode, simulated (sender with storm mode off and on)\n");
        let _ = writeln!(
            out,
            "Method (`tests/bench/src/storm_mode.rs`): a deterministic discrete-event simulation on a **simulated \
             clock** (milliseconds), no AWS and no emulator. The decisions are the domain core's own: every send, \
             hold and stale verdict comes from `tocsin::domain::storm::plan` (and through it `build_digest`, whose \
             digest text's real part count is what a digest costs), with `DigestPolicy::new({max_seg})` (budget {budget} \
             SMS per {window} min per recipient) for storm on and the same policy disabled for storm off; the lane \
             and lateness decisions are `storm::Lane::of` and `storm::late_verdict`. **Modelled** around them, after \
             `functions/intake/src/lib.rs` and `functions/sender/src/`: **intake**, at each alert's arrival, \
             reads the send queue's visible messages (`ahead`) — **exactly**, where the real intake reads SQS's \
             approximate count at most every 5 s per instance — and takes the wait ahead as a lower bound, `ahead` \
             × 1 part at the account's {rate} parts/s with storm mode off, none with it on; storm off only, an alert \
             whose arrival + wait is past its deadline is **said early** (escalated at intake and still eligible to \
             be sent: a separate figure, a miss only if it also misses its deadline), the wait being, for an alert \
             that goes on the urgent lane, the urgent lane's own visible messages × 1 part; behind a backlog (`ahead` ≥ \
             `URGENT_MIN_BACKLOG` = {umb}) an alert with deadline − arrival − wait under `URGENT_SLACK` = {us} min \
             goes on the **urgent lane** as well as on the send queue (two messages). One standard SQS send queue \
             taken in enqueue order among the visible messages, and the urgent lane, taken the same way, whose \
             messages expire {ret} s after they were sent (`UrgentSendQueue`'s retention); {inst} sender instances \
             (`SenderMaxConcurrency`'s default), each taking the next ≤ {batch} visible messages when free and, when \
             the oldest of them waited ≥ `URGENT_POLL_AFTER` = {upa} s, first up to `URGENT_TAKE` = {ut} visible \
             urgent messages, processed before the batch (storm off: in order, urgent first; storm on: claimed and \
             grouped with the batch's); a message whose alert is already claimed (through its other message), \
             sent or escalated does nothing and is deleted (the claim's `Duplicate`); a held urgent message comes \
             back hidden as a send-queue one does, unless its retention ends first (then it is gone, and an alert \
             left with no message on either lane is escalated unsent by the deadline sweep: \"stranded\", counted \
             as stale); the account's {rate} parts/s shared between the instances ({mpp} ms per part, parts \
             serialised per instance; publishing takes no other time); every SMS delivered {lat} s (carrier \
             latency, fixed) after its last part leaves. Storm off: per message in order, stale (now ≥ deadline: \
             escalated, not sent) or sent alone. \"Storm off, no urgent lane\" is the same without the lane (the \
             behaviour before it; said early still counted). Storm on: the messages' alerts claimed, grouped by \
             recipient, groups by earliest deadline; each group pulls up to `BACKLOG_PULL` = {pull} of \
             the recipient's pending alerts (arrived, unclaimed, deadline not passed; earliest deadline first; ≤ \
             `MAX_DIGEST_MEMBERS` = {maxm} in all), then `plan` with the instants of the SMS already sent to that \
             recipient (the per-recipient budget state is modelled as the sender's stored send instants); held \
             messages of the batch are hidden until the budget frees, pulled ones released (their own message is \
             still queued), stale ones escalated. \"Storm on, no budget\" is the same with `plan` given no send \
             instants. An alert is covered when the SMS carrying it (alone or in a digest) is delivered by its \
             deadline; a miss is stale (escalated unsent) or delivered late (escalated by the deadline sweep), so \
             escalations = misses. The EDF bound is `storm::edf_schedule` of the same work at {rate} parts/s with \
             each deadline moved {lat} s earlier (the carrier latency), `Merge::None` (one SMS per alert) and, as \
             a reference only, `Merge::Digests {{ max_segments: {max_seg} }}` (no budget, no member cap). \
             **Not modelled**: the sweep's re-enqueue (an alert still queued {rq} min after intake is enqueued \
             again, on the urgent lane under {us} min of slack; the alerts it would have concerned are counted \
             below), SQS's approximate and cached queue length at intake, standard queues' loose order, AWS call \
             latencies, SNS throttling, DynamoDB and GSI (pending-index) lag, failures and redeliveries, duplicate \
             messages, the invocation timeout. The simulation asserts that every alert \
             ends in exactly one SMS or escalated unsent (none lost, none sent twice), in every run (stranded \
             alerts count as escalated unsent, and are shown).\n",
            max_seg = sm::MAX_SEGMENTS,
            budget = tocsin::domain::storm::DigestPolicy::DEFAULT_MAX_SMS_PER_WINDOW,
            window = tocsin::domain::storm::DigestPolicy::DEFAULT_WINDOW.as_secs() / 60,
            inst = sm::INSTANCES,
            batch = sm::BATCH,
            rate = sm::ACCOUNT_PARTS_PER_S,
            mpp = sm::ms_per_part(),
            lat = sm::CARRIER_LATENCY_MS / 1000,
            pull = tocsin::domain::storm::BACKLOG_PULL,
            maxm = tocsin::domain::storm::MAX_DIGEST_MEMBERS,
            umb = sm::URGENT_MIN_BACKLOG,
            us = tocsin::domain::storm::URGENT_SLACK.as_secs() / 60,
            ret = sm::URGENT_RETENTION_MS / 1000,
            upa = sm::URGENT_POLL_AFTER_MS / 1000,
            ut = sm::URGENT_TAKE,
            rq = sm::REQUEUE_AFTER_MS / 60_000,
        );
        let Some(result) = &self.storm_mode else { return };
        let s: &StormMode = match result {
            Ok(s) => s,
            Err(e) => {
                error_line(out, "storm mode simulation", e);
                rows.push((
                    "9. storm mode (simulated)".into(),
                    "see section 9".into(),
                    "not measured".into(),
                    "—".into(),
                ));
                return;
            }
        };
        let per = &s.per_recipient;
        let _ = writeln!(
            out,
            "Workload (seed {seed}, `TOCSIN_BENCH_STORM_SEED`): {n} alerts arriving uniformly within {span} s to \
             {r} recipients ({a} and {b} alerts to the two busiest, {lo}–{hi} to each of the others); deadlines \
             10 % ({two}) at 2 min, 60 % at 15 min, 30 % at 60 min after arrival; texts of 1–3 SMS parts \
             (uniform; realistic alert text, each checked with `segments::measure`), {parts} parts in all.\n",
            seed = s.seed,
            n = thousands(s.alerts as u64),
            span = sm::ARRIVAL_SPAN_MS / 1000,
            r = per.len(),
            a = per.first().copied().unwrap_or(0),
            b = per.get(1).copied().unwrap_or(0),
            lo = per.last().copied().unwrap_or(0),
            hi = per.get(2).copied().unwrap_or(0),
            two = s.two_min_alerts,
            parts = thousands(s.total_parts),
        );
        let labels = [
            "SMS sent",
            "SMS parts",
            "alerts covered by a delivered SMS before their deadline",
            "deadline misses",
            "said early: escalated at intake, the lower-bound wait already past the deadline (then covered anyway)",
            "alerts also put on the urgent lane (claimed from it; urgent messages expired unread)",
            "escalations",
            "intake → delivered, 2-min alerts, p50",
            "intake → delivered, 2-min alerts, p95",
            "intake → delivered, 15- and 60-min alerts, p95",
            "digests (largest, members)",
            "backlog pulls (conditional claims)",
            "alerts held for the budget (then missed)",
            "SMS sent over budget (a deadline would not wait)",
            "most SMS to one recipient in any 5 min",
            "last delivery",
        ];
        let columns = [
            mode_cells(&s.off_without_lane),
            mode_cells(&s.off),
            mode_cells(&s.on),
            mode_cells(&s.on_without_budget),
            reference_cells(&s.edf, s.alerts),
            reference_cells(&s.edf_digests, s.alerts),
        ];
        let _ = writeln!(
            out,
            "| | storm off, no urgent lane (before) | storm off | **storm on** | storm on, no budget | EDF bound (one SMS per alert) | EDF, digests merged (reference) |\n|---|---|---|---|---|---|---|"
        );
        for (i, label) in labels.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {label} | {} | {} | **{}** | {} | {} | {} |",
                columns[0][i], columns[1][i], columns[2][i], columns[3][i], columns[4][i], columns[5][i]
            );
        }
        out.push('\n');
        let misses_class = |r: &ModeRun| {
            sm::DEADLINES
                .iter()
                .zip(r.misses_by_class)
                .map(|((m, _), n)| format!("{m} min: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "Misses by deadline class: storm off, no urgent lane {}; storm off {}; storm on {}; storm on, no budget \
             {}.\n",
            misses_class(&s.off_without_lane),
            misses_class(&s.off),
            misses_class(&s.on),
            misses_class(&s.on_without_budget)
        );
        let (lane, before) = (&s.off, &s.off_without_lane);
        let _ = writeln!(
            out,
            "The urgent lane, storm off: {enq} alerts also went on the lane ({claimed} were claimed from it, {expired} \
             urgent messages expired unread); the 2-min alerts' misses went from {m0} without the lane to {m1} with \
             it, all misses from {a0} to {a1} (15-min alerts: {f0} → {f1}; 60-min: {h0} → {h1}); 2-min p50 {p50_0} → \
             {p50_1}, p95 {p95_0} → {p95_1}; the 15- and 60-min alerts' p95 {l0} → {l1} (what overtaking costs \
             them). Said early: {se} (with the lane; {se0} without), {sec} of them covered after all; the longest \
             lower-bound wait intake estimated was {mw} (with the lane; {mw0} without), against the shortest \
             deadline, 2 min. Storm on: {on_enq} alerts went on the lane, the instances took {on_taken} urgent \
             messages and claimed {on_claimed} alerts from them (the others' alerts were already claimed or sent, \
             mostly in a digest through the backlog pull), {on_expired} expired unread. Alerts stranded \
             (unclaimed, no message left on either lane: escalated unsent by the deadline sweep), storm off without \
             the lane / storm off / storm on / storm on without budget: {st}. Alerts first claimed more than 10 min \
             after intake before their deadline, where the sweep's re-enqueue (not modelled) would have added a \
             message, same order: {rq}.\n",
            enq = lane.urgent_enqueued,
            claimed = lane.urgent_claimed,
            expired = lane.urgent_expired,
            m0 = before.misses_by_class[0],
            m1 = lane.misses_by_class[0],
            a0 = before.misses(),
            a1 = lane.misses(),
            f0 = before.misses_by_class[1],
            f1 = lane.misses_by_class[1],
            h0 = before.misses_by_class[2],
            h1 = lane.misses_by_class[2],
            p50_0 = secs(before.p50_two_min_ms),
            p50_1 = secs(lane.p50_two_min_ms),
            p95_0 = secs(before.p95_two_min_ms),
            p95_1 = secs(lane.p95_two_min_ms),
            l0 = secs(before.p95_longer_ms),
            l1 = secs(lane.p95_longer_ms),
            se = lane.said_early,
            se0 = before.said_early,
            sec = lane.said_early_covered,
            on_enq = s.on.urgent_enqueued,
            on_claimed = s.on.urgent_claimed,
            on_taken = s.on.urgent_taken,
            on_expired = s.on.urgent_expired,
            mw = secs(Some(lane.max_wait_ms)),
            mw0 = secs(Some(before.max_wait_ms)),
            st = s.runs().iter().map(|r| format!("{}", r.stranded)).collect::<Vec<_>>().join(" / "),
            rq = s.runs().iter().map(|r| format!("{}", r.requeue_due)).collect::<Vec<_>>().join(" / "),
        );
        if let Some((before, lane)) = &s.heavy {
            let _ = writeln!(
                out,
                "Late said early under a heavier storm ({n} alerts in the same {span} s, same seed, storm off): the \
                 longest lower-bound wait was {mw}; without the urgent lane {se0} alerts were said early, {sec0} of \
                 them then covered, {m0} misses in all; **with the lane {se1} were said early and {sec1} of them then \
                 covered** ({m1} misses in all): an alert that also goes on the urgent lane overtakes the send queue, \
                 so intake judges it on the urgent lane's own backlog — a lower bound still: nothing said early makes \
                 its deadline, so on-call is never paged early for an alert that arrives in time.\n",
                n = thousands(sm::HEAVY_ALERTS as u64),
                span = sm::ARRIVAL_SPAN_MS / 1000,
                mw = secs(Some(before.max_wait_ms)),
                se0 = before.said_early,
                sec0 = before.said_early_covered,
                m0 = before.misses(),
                se1 = lane.said_early,
                sec1 = lane.said_early_covered,
                m1 = lane.misses(),
            );
        }
        let busiest = per.first().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "The budget under this storm (storm on): {over} SMS went out over budget and one recipient got {max} SMS \
             within 5 minutes against a budget of {budget}. Two causes, both by design: a recipient with more \
             claimable alerts than `MAX_DIGEST_MEMBERS` needs several digests anyway (the busiest has {busiest}: at \
             least {min_digests}), and an alert whose deadline falls before the budget frees (+ 60 s) goes out at \
             once, with everything claimable. Holding delayed {held} alerts until the budget freed ({held_missed} of \
             them missed; last delivery {last:.0} s against {last_nb:.0} s without the budget). The backlog's \
             conditional claims: {pulls} with the budget, {pulls_nb} without — the sender reads the backlog's \
             deadlines first and does not claim what the budget would only hand back (`storm::holds_all_until`).\n",
            over = s.on.over_budget,
            max = s.on.max_sms_per_window,
            budget = tocsin::domain::storm::DigestPolicy::DEFAULT_MAX_SMS_PER_WINDOW,
            min_digests = busiest.div_ceil(tocsin::domain::storm::MAX_DIGEST_MEMBERS),
            held = s.on.budget_held,
            held_missed = s.on.budget_held_missed,
            last = s.on.finished_ms as f64 / 1000.0,
            last_nb = s.on_without_budget.finished_ms as f64 / 1000.0,
            pulls_nb = thousands(s.on_without_budget.pulled as u64),
            pulls = thousands(s.on.pulled as u64),
        );
        if !s.other_seeds.is_empty() {
            let o = &s.other_seeds;
            let worst_p95 = o.iter().map(|f| f.on_p95_two_min_ms.unwrap_or(i64::MAX)).max().filter(|&p| p < i64::MAX);
            let _ = writeln!(
                out,
                "The next {} seeds ({}–{}), same shape, storm on: misses {} (EDF bound {}; storm off {}, without the \
                 urgent lane {}; storm off's 2-min misses {}, without the lane {}); 2-min p95 up to {}; parts \
                 {:.1}–{:.1} % of storm off's; most SMS to one recipient in 5 min up to {}; lost or sent twice in any \
                 run: {}.\n",
                o.len(),
                o.first().map(|f| f.seed).unwrap_or(0),
                o.last().map(|f| f.seed).unwrap_or(0),
                spread(o.iter().map(|f| f.on_misses)),
                spread(o.iter().map(|f| f.edf_misses)),
                spread(o.iter().map(|f| f.off_misses)),
                spread(o.iter().map(|f| f.off_without_lane_misses)),
                spread(o.iter().map(|f| f.off_two_min_misses)),
                spread(o.iter().map(|f| f.off_without_lane_two_min_misses)),
                secs(worst_p95),
                o.iter().map(|f| f.parts_ratio).fold(f64::INFINITY, f64::min) * 100.0,
                o.iter().map(|f| f.parts_ratio).fold(0.0, f64::max) * 100.0,
                o.iter().map(|f| f.max_sms_per_window).max().unwrap_or(0),
                o.iter().map(|f| f.lost_or_twice).sum::<usize>()
            );
        }
        let allowance = s.miss_allowance();
        rows.push((
            "9. storm mode: SMS parts, on ÷ off (simulated)".into(),
            format!("≤ {:.0} % of storm off's", sm::PARTS_TARGET_RATIO * 100.0),
            format!("{} of {} ({:.1} %)", thousands(s.on.parts), thousands(s.off.parts), s.parts_ratio() * 100.0),
            verdict(s.parts_met()).into(),
        ));
        rows.push((
            "9. storm mode: every alert in one delivered SMS or escalated (simulated)".into(),
            "none lost, none sent twice".into(),
            format!(
                "storm on: {} covered + {} escalated of {}; lost {}, sent twice {} (off without and with the urgent \
                 lane, on, on without budget)",
                s.on.covered,
                s.on.escalations(),
                s.alerts,
                s.runs().iter().map(|r| r.lost).sum::<usize>(),
                s.runs().iter().map(|r| r.twice).sum::<usize>()
            ),
            verdict(s.conservation_met()).into(),
        ));
        rows.push((
            "9. storm mode: deadline misses vs. EDF bound (simulated)".into(),
            format!("≤ EDF bound + {} % of alerts ({allowance})", sm::MISS_SLACK_PERCENT),
            format!(
                "storm on {}; EDF bound {}; storm off {} (without the urgent lane {}; said early {})",
                s.on.misses(),
                s.edf.misses,
                s.off.misses(),
                s.off_without_lane.misses(),
                s.off.said_early
            ),
            verdict(s.misses_met()).into(),
        ));
        rows.push((
            format!("9. storm mode: p95 intake → delivered, {TWO_MIN} (simulated)"),
            format!("≤ {} s", sm::P95_TWO_MIN_TARGET_MS / 1000),
            format!(
                "storm on {}; EDF bound {}; storm off {} (without the urgent lane {})",
                secs(s.on.p95_two_min_ms),
                secs(s.edf.p95_two_min_ms),
                secs(s.off.p95_two_min_ms),
                secs(s.off_without_lane.p95_two_min_ms)
            ),
            verdict(s.p95_met()).into(),
        ));
    }
}

/// `3–7`, or `4` when all equal.
fn spread(v: impl Iterator<Item = usize>) -> String {
    let v: Vec<usize> = v.collect();
    match (v.iter().min(), v.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => lo.to_string(),
        (Some(lo), Some(hi)) => format!("{lo}–{hi}"),
        _ => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(3_840), "3,840");
        assert_eq!(thousands(258), "258");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
