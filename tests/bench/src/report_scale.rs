//! BENCHMARKS.md sections for issue 17: write units per delivered alert (4b), the cost per
//! million alerts (4c), the capacity model of one stack (4d), and the sweep's throughput (5b).

use std::fmt::Write;

use crate::capacity::Capacity;
use crate::report::{Report, Row, error_line, verdict};
use crate::stats::ms;
use crate::wru::{self, Wru};
use crate::{cost, sweep_rate};

fn indexes_text(w: &Wru) -> String {
    w.indexes.iter().map(|i| format!("`{}` ({})", i.name, i.projection.describe())).collect::<Vec<_>>().join(", ")
}

/// Which writes dominate and what would cut them, from the measured writes.
fn diagnosis(w: &Wru) -> String {
    let mut heavy: Vec<&wru::WriteCost> = w.writes.iter().collect();
    heavy.sort_by_key(|x| std::cmp::Reverse(x.total()));
    let top: Vec<String> = heavy
        .iter()
        .take(3)
        .map(|x| format!("{} {} `{}` ({} WRU)", x.function, x.operation, x.item, x.total()))
        .collect();
    let doubled: u64 = w.writes.iter().filter(|x| x.transactional).map(|x| x.table_wru / 2).sum();
    let n_tx = w.writes.iter().filter(|x| x.transactional).count();
    let big = w.writes.iter().filter(|x| x.bytes_before.max(x.bytes_after) > 1024).count();
    let mut parts = vec![
        format!("The heaviest writes: {}.", top.join("; ")),
        format!(
            "Transactions double {n_tx} writes: {doubled} WRU of the {} table WRU are the transactional surcharge.",
            w.table_wru()
        ),
    ];
    if big > 0 {
        parts.push(format!("{big} writes are of items over 1 KB (2+ WRU each)."));
    }
    for ix in &w.indexes {
        let writes: Vec<&wru::IndexWrite> =
            w.writes.iter().flat_map(|x| x.index.iter()).filter(|i| i.index == ix.name).collect();
        let ops: u64 = writes.iter().map(|i| if i.kind == "delete+put" { 2 } else { 1 }).sum();
        let units = w.of_index(&ix.name);
        let largest = writes.iter().map(|i| i.bytes).max().unwrap_or(0);
        let moves = writes.iter().filter(|i| i.kind == "delete+put").count();
        let mut t = format!(
            "GSI `{}` ({}): {units} WRU in {ops} index writes, entries up to {largest} B",
            ix.name,
            ix.projection.describe()
        );
        if units > ops {
            t.push_str(&format!(
                " — a projection of only what its reader needs (INCLUDE) keeps each entry under 1 KB and saves {} WRU",
                units - ops
            ));
        }
        if moves > 0 {
            t.push_str(&format!(
                "; {moves} state changes move the item in it (a changed index key: a delete and a put each)"
            ));
        }
        t.push('.');
        parts.push(t);
    }
    parts.push(
        "A delivery record's observation already travels on the intent in its one state write \
         (`Commit::Carried`), and the number's carrier is written only when it is news (a number's first \
         record, another carrier, or an hour on: the measured alert's is not; 1 WRU more otherwise). What else \
         would cut them: keep the intent under 1 KB once it carries an observation (the carried JSON takes it \
         over: 2 WRU), the sender's publish outcome carried the same way where its facts-first order allows, and \
         an SMS moved from the pending to the in-flight index without a delete and a put."
            .into(),
    );
    parts.join(" ")
}

impl Report {
    pub(crate) fn wru_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 4b. Write units per delivered alert (measured)\n");
        let _ = writeln!(
            out,
            "Method (`tests/bench/src/wru.rs`): one delivered alert (after a warm-up alert to the same number: an on-call phone's next alert) through the real handlers \
             (`tocsin_tests::Pipeline`: submit → sender → the carrier's SUCCESS record → status), storm mode off (the \
             default, on, adds the send log's write: one write unit more per SMS), the emulator's \
             request recorder on around each handler. Every write request (PutItem, UpdateItem, DeleteItem, \
             TransactWriteItems, BatchWriteItem) is read back from the recording and applied in order to an image of \
             the tables scanned just before the phase, so each write's item is known before and after it; after each \
             phase the computed images are compared with the emulator's items. Item size by AWS's rules (attribute \
             names + values: strings their UTF-8 bytes, numbers ⌈significant digits ÷ 2⌉ + 1, booleans/nulls 1, \
             lists/maps 3 + 1 per element); a write costs 1 WRU per started KB of the larger of its before and after \
             sizes, ×2 inside TransactWriteItems. Each GSI the item is in before or after (from template.yaml as it is \
             when the bench runs: {}) costs its own writes: entering or leaving the sparse index 1, a changed index \
             key a delete + a put (2), a changed projected attribute 1, each at the index entry's size (table key + \
             index key + projected attributes + {} B). GSI writes are not doubled inside transactions. Goal: ≤ {} WRU \
             per delivered alert.\n",
            self.wru.as_ref().and_then(|w| w.as_ref().ok()).map(indexes_text).unwrap_or_else(|| "—".into()),
            wru::INDEX_ENTRY_OVERHEAD,
            wru::TARGET_WRU
        );
        let Some(w) = &self.wru else { return };
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                error_line(out, "write units", e);
                rows.push(("4b. WRU per delivered alert".into(), "≤ 12".into(), "not measured".into(), "—".into()));
                return;
            }
        };
        let total = w.total();
        write_table(out, w);
        let met = (total as f64) <= wru::TARGET_WRU;
        rows.push((
            "4b. WRU per delivered alert (measured)".into(),
            format!("≤ {}", wru::TARGET_WRU),
            format!("{total} WRU ({} table, {} GSI)", w.table_wru(), total - w.table_wru()),
            verdict(met).into(),
        ));
        if !met {
            let _ = writeln!(out, "**Why missed.** {}\n", diagnosis(w));
        }
        self.wru_eum_section(out, rows);
    }

    /// Section 4b on the other provider: the same alert through AWS End User Messaging.
    fn wru_eum_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let Some(w) = &self.wru_eum else { return };
        let name = "4b. WRU per delivered alert, End User Messaging (measured)";
        let _ = writeln!(out, "### 4b, on End User Messaging\n");
        let _ = writeln!(
            out,
            "The same method with `SmsProvider=end-user-messaging`: the stand-in's carrier writes the message's \
             events (`TEXT_SUCCESSFUL`, non-final, then `TEXT_DELIVERED`) into the stack's event group; no \
             message-id index is written. Goal: ≤ {} WRU per delivered alert.\n",
            wru::TARGET_WRU
        );
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                error_line(out, "write units (End User Messaging)", e);
                rows.push((name.into(), format!("≤ {}", wru::TARGET_WRU), "not measured".into(), "—".into()));
                return;
            }
        };
        let total = w.total();
        write_table(out, w);
        let met = (total as f64) <= wru::TARGET_WRU;
        rows.push((
            name.into(),
            format!("≤ {}", wru::TARGET_WRU),
            format!("{total} WRU ({} table, {} GSI)", w.table_wru(), total - w.table_wru()),
            verdict(met).into(),
        ));
        if !met {
            let _ = writeln!(out, "**Why missed.** {}\n", diagnosis(w));
        }
    }

    pub(crate) fn cost_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 4c. Cost per million delivered alerts\n");
        let Some(Ok(w)) = &self.wru else {
            let _ = writeln!(out, "Needs section 4b (`wru`).\n");
            return;
        };
        let lines = cost::estimate(w);
        let _ = writeln!(
            out,
            "From section 4b's measured alert (`tests/bench/src/cost.rs`). Prices: AWS's public pricing pages for \
             region {}, on-demand, first tier, without free tier, as read on {} and kept as constants in the bench \
             (this machine has no network: they are assumptions, each with its source named) — API Gateway pricing \
             (HTTP APIs ${:.2}/1M requests), EventBridge pricing (custom events ${:.2}/1M), Lambda pricing (Arm \
             ${:.10}/GB-s, ${:.2}/1M requests), DynamoDB pricing (on-demand ${:.3}/1M WRU, ${:.3}/1M RRU, storage \
             ${:.2}/GB-month, PITR ${:.2}/GB-month), SQS pricing (standard ${:.2}/1M requests), KMS pricing \
             (${:.2}/10k requests, ${:.2}/key-month), CloudWatch pricing (Logs ingestion ${:.2}/GB, archive \
             ${:.2}/GB-month). Lambda at the template's memory (128 MB, status 512 MB); handler times are the emulator-bound in-process times \
             of section 4b (AWS latencies are lower: compute is an upper bound). Batching at sustained load: the \
             sender's BatchSize of {:.0} (full batches), {:.0} delivery records per status invocation (an assumption: \
             the subscription batches log events). Retention in force: ledger items until deadline + {:.0} days (TTL \
             `expires_at`; the default 15-minute deadline makes that ~1 month), logs {} days (`LogRetentionDays`).\n",
            cost::REGION,
            cost::PRICES_READ,
            cost::HTTP_API_REQUEST * 1e6,
            cost::EVENTBRIDGE_EVENT * 1e6,
            cost::LAMBDA_ARM_GB_S,
            cost::LAMBDA_REQUEST * 1e6,
            cost::DDB_WRU * 1e6,
            cost::DDB_RRU * 1e6,
            cost::DDB_STORAGE_GB_MONTH,
            cost::DDB_PITR_GB_MONTH,
            cost::SQS_REQUEST * 1e6,
            cost::KMS_REQUEST * 1e4,
            cost::KMS_KEY_MONTH,
            cost::LOGS_INGEST_GB,
            cost::LOGS_STORE_GB_MONTH,
            cost::SENDER_BATCH,
            cost::STATUS_RECORDS_PER_INVOCATION,
            cost::LEDGER_RETENTION_DAYS,
            cost::LOG_RETENTION_DAYS
        );
        let sum = cost_table(out, &lines);
        let _ = writeln!(
            out,
            "| **total, excluding SMS** | | | **{sum:.2}** | |\n\nNot per alert, so not above: the escalation sweep \
             (a scheduled invocation a minute and one Query per due-index partition per run: ~1,440 invocations and \
             ~{} Queries a day), the KMS key ($1/month), CloudWatch alarms and the EMF custom metrics (per metric-month). \
             SMS, separately: ${:.5} per part to a US number (the `priceInUSD` of SNS's delivery record) → **${:.0} \
             per 1M single-part alerts**; it dominates everything above by about three orders of magnitude.\n",
            1440 * self
                .capacity
                .as_ref()
                .and_then(|c| c.as_ref().ok())
                .map(|c| c.settings.due_shards as usize)
                .unwrap_or(16),
            cost::SMS_US_PART,
            cost::SMS_US_PART * 1e6
        );
        rows.push((
            "4c. cost per 1M delivered alerts (excl. SMS)".into(),
            "report, every item with its source".into(),
            format!("${sum:.2}"),
            "reported".into(),
        ));
        self.cost_eum_section(out, rows);
    }

    /// Section 4c on End User Messaging: the same model on section 4b's End User Messaging alert.
    fn cost_eum_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let Some(Ok(w)) = &self.wru_eum else { return };
        let lines = cost::estimate(w);
        let _ = writeln!(
            out,
            "### 4c, on End User Messaging\n\nThe same model and prices on section 4b's End User Messaging alert: \
             its own writes, reads, handler times and logs; the provider's records are its events in the stack's \
             event group ({} for this SMS: the carrier's acceptance and the delivery). The configuration set and \
             its CloudWatch Logs destination have no charge of their own; the SMS is billed as under SNS.\n",
            w.delivery_records
        );
        let sum = cost_table(out, &lines);
        let _ = writeln!(out, "| **total, excluding SMS** | | | **{sum:.2}** | |\n");
        rows.push((
            "4c. cost per 1M delivered alerts, End User Messaging (excl. SMS)".into(),
            "report, every item with its source".into(),
            format!("${sum:.2}"),
            "reported".into(),
        ));
    }

    pub(crate) fn capacity_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 4d. Capacity model of one stack\n");
        let Some(c) = &self.capacity else {
            let _ = writeln!(out, "Needs section 4b (`wru`).\n");
            return;
        };
        let c: &Capacity = match c {
            Ok(c) => c,
            Err(e) => {
                error_line(out, "capacity model", e);
                return;
            }
        };
        let _ = writeln!(
            out,
            "From section 4b's measured calls, write units and handler times, template.yaml's settings \
             (`TOCSIN_DUE_SHARDS` = S = {}, `SmsRatePerSecond` = {}, `AlertApiRateLimit` = {}, `SenderMaxConcurrency` \
             = {}, sender BatchSize {}) and AWS's documented limits (a DynamoDB partition, a GSI's too, ~{:.0} WCU/s \
             and ~{:.0} RCU/s; {:.0} WRU/s per on-demand table by default, ~{:.0} WRU/s at once for a new one; SNS \
             20 SMS parts/s by default; {:.0} concurrent Lambda executions per account by default) \
             (`tests/bench/src/capacity.rs`). The due-index partitions are written round robin (`due_home`), so \
             each takes 1/S of the index's writes.\n",
            c.settings.due_shards,
            c.settings.sms_rate,
            c.settings.api_rate,
            c.settings.sender_concurrency,
            c.settings.sender_batch,
            crate::capacity::PARTITION_WCU_PER_S,
            crate::capacity::PARTITION_RCU_PER_S,
            crate::capacity::TABLE_WRU_PER_S,
            crate::capacity::NEW_TABLE_WRU_PER_S,
            crate::capacity::LAMBDA_ACCOUNT_CONCURRENCY
        );
        let _ = writeln!(
            out,
            "| function | AWS calls per alert | WRU per alert | handler time (emulator) |\n|---|---|---|---|"
        );
        for (f, calls, wru, t) in &c.per_function {
            let _ = writeln!(out, "| {f} | {calls} | {wru} | {t:.2} ms |");
        }
        let _ = writeln!(out, "\n| limit | adjustable | max alerts/s | from |\n|---|---|---|---|");
        let mut sorted: Vec<_> = c.ceilings.iter().collect();
        sorted.sort_by(|a, b| a.alerts_per_s.total_cmp(&b.alerts_per_s));
        for x in sorted {
            let rate = if x.alerts_per_s.is_finite() { format!("{:.0}", x.alerts_per_s) } else { "—".into() };
            let _ =
                writeln!(out, "| {} | {} | {} | {} |", x.limit, if x.adjustable { "yes" } else { "no" }, rate, x.how);
        }
        let (Some(d), s) = (c.at_defaults(), c.structural()) else { return };
        let structural = match s {
            Some(s) => format!(
                "With every adjustable quota and parameter raised, the stack's own ceiling is **{:.0} alerts/s**, bound by \
                 the {}.",
                s.alerts_per_s, s.limit
            ),
            None => "No fixed limit remains once the adjustable ones are raised.".into(),
        };
        let _ = writeln!(
            out,
            "\n**Maximum sustained rate at the template's defaults: {:.0} alerts/s, bound by the {}.** {}\n",
            d.alerts_per_s, d.limit, structural
        );
        rows.push((
            "4d. max sustained alerts/s, one stack".into(),
            format!("model at S = {}", c.settings.due_shards),
            format!(
                "{:.0}/s at defaults ({}); {}",
                d.alerts_per_s,
                crate::report::truncate(&d.limit, 40),
                s.map(|s| format!("{:.0}/s with quotas raised", s.alerts_per_s)).unwrap_or_default()
            ),
            "reported".into(),
        ));
    }

    pub(crate) fn sweep_rate_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 5b. Sweep throughput versus concurrency\n");
        let Some(results) = &self.sweep_rates else { return };
        let (due, budget, defaults) = self.sweep_rate_settings.unwrap_or((sweep_rate::DUE, sweep_rate::BUDGET, true));
        let _ = writeln!(
            out,
            "Method (`tests/bench/src/sweep_rate.rs`): per setting of `TOCSIN_SWEEP_CONCURRENCY`, a fresh pipeline \
             with it as an environment override; {due} alerts submitted and sent (accepted, never delivered; the \
             sender's SMS pacing raised for seeding only); the clock moved 16 minutes on; one sweep run with a time \
             budget of {:.1} s (`Pipeline::run_escalation_within`, as the Lambda stops before its timeout), its \
             requests through the harness's fault proxy, which delays each by {} ms before forwarding it (a network \
             latency: on AWS a call's time is mostly such a wait, which concurrency overlaps; the emulator answers one \
             request at a time, so without it the run measures moto's own service time, which no concurrency \
             shortens). Escalations per second = escalated ÷ the run's time. The figures are the code's concurrency \
             against one local server with that latency, not AWS's rates.{}\n",
            budget.as_secs_f64(),
            results.iter().find_map(|(_, r)| r.as_ref().ok().map(|x| x.latency.as_millis())).unwrap_or_default(),
            if defaults { "" } else { " **Non-default bench settings** (see the knobs above)." }
        );
        let _ = writeln!(
            out,
            "| concurrency | due | escalated within budget | run time | escalations/s | AWS calls per escalation | run complete | errors |\n|---|---|---|---|---|---|---|---|"
        );
        let mut rates = Vec::new();
        for (c, r) in results {
            match r {
                Ok(x) => {
                    rates.push(x.per_second());
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} ms | {:.1} | {:.1} | {} | {} |",
                        x.concurrency,
                        x.due,
                        x.escalated,
                        ms(x.elapsed),
                        x.per_second(),
                        x.calls_per_escalation(),
                        if x.complete { "yes" } else { "no (budget)" },
                        x.errors
                    );
                }
                Err(e) => {
                    let _ = writeln!(
                        out,
                        "| {c} | {due} | not measured: `{}` | | | | | |",
                        crate::report::truncate(&e.to_string(), 200)
                    );
                }
            }
        }
        let grows = rates.len() > 1 && rates.windows(2).all(|w| w[1] >= w[0] * 0.95) && rates.last() > rates.first();
        out.push('\n');
        rows.push((
            "5b. sweep escalations/s vs. concurrency".into(),
            "grow with concurrency".into(),
            results
                .iter()
                .filter_map(|(c, r)| r.as_ref().ok().map(|x| format!("{c}: {:.1}/s", x.per_second())))
                .collect::<Vec<_>>()
                .join(" · "),
            if grows { verdict(true).into() } else { "see section 5b".into() },
        ));
    }
}

impl Report {
    pub(crate) fn idle_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 4e. What an idle stack costs a month\n");
        let Some(idle) = &self.idle else { return };
        let idle = match idle {
            Ok(i) => i,
            Err(e) => {
                error_line(out, "idle", e);
                return;
            }
        };
        let (lines, canary) = crate::idle::month(idle);
        let _ = writeln!(
            out,
            "A stack at the template's defaults that no alert reaches, for a 30-day month (`tests/bench/src/idle.rs`): \
             what template.yaml declares (the key, the alarms and the metrics each queries, the dashboard) and the \
             one thing that runs when nothing happens, the escalation sweep, measured — one run over an empty ledger \
             on the emulator (after an unmeasured one), its AWS calls, handler time, log and EMF bytes and the custom \
             metrics it writes — times its schedule's {:.0} runs. Prices as in section 4c (same constants, read on {}), \
             plus CloudWatch alarms ${:.2} per alarm metric-month, dashboards ${:.2} a month, custom metrics ${:.2} per \
             metric-month, EventBridge Scheduler ${:.2}/1M invocations; no free tier (an account's first 10 alarm \
             metrics, 3 dashboards, 10 custom metrics and 14 million schedule invocations a month are free). Empty \
             tables, queues and log groups cost nothing; the HTTP API and the EventBridge rule bill per request.\n",
            crate::idle::SWEEPS_PER_MONTH,
            crate::cost::PRICES_READ,
            crate::idle::ALARM_METRIC_MONTH,
            crate::idle::DASHBOARD_MONTH,
            crate::idle::CUSTOM_METRIC_MONTH,
            crate::idle::SCHEDULER_INVOCATION * 1e6,
        );
        let _ =
            writeln!(out, "| item | a month | unit price (USD) | USD a month | quantity from |\n|---|---|---|---|---|");
        for l in lines.iter().chain(&canary) {
            let _ = writeln!(
                out,
                "| {} | {:.3} {} | {:.10} | {:.2} | {} |",
                l.item,
                l.quantity,
                l.unit,
                l.unit_price,
                l.usd(),
                l.source
            );
        }
        let sum = crate::idle::total(&lines);
        let with_canary = sum + crate::idle::total(&canary);
        let _ = writeln!(
            out,
            "| **total, idle, canary off (the default)** | | | **{sum:.2}** | |\n| **total with the canary (CanaryNumber \
             set, hourly, US)** | | | **{with_canary:.2}** | |\n\nThe custom metrics the idle sweep writes: {}.\n",
            idle.sweep.metrics.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        );
        rows.push((
            "4e. idle stack, per month".into(),
            "report, every item with its source".into(),
            format!("${sum:.2} (canary off); ${with_canary:.2} with an hourly canary to a US number"),
            "reported".into(),
        ));
    }
}

/// The writes of one measured alert, per write, per function and per index.
fn write_table(out: &mut String, w: &wru::Wru) {
    let _ = writeln!(
        out,
        "| function | write | item | bytes before → after | table WRU | index writes | WRU |\n|---|---|---|---|---|---|---|"
    );
    for x in &w.writes {
        let ix = if x.index.is_empty() {
            "—".to_owned()
        } else {
            x.index
                .iter()
                .map(|i| format!("{} {} ({} B): {}", i.index, i.kind, i.bytes, i.wru))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(
            out,
            "| {} | {} | `{}` | {} → {} | {}{} | {} | **{}** |",
            x.function,
            x.operation,
            x.item,
            x.bytes_before,
            x.bytes_after,
            x.table_wru,
            if x.transactional { " (×2)" } else { "" },
            ix,
            x.total()
        );
    }
    let total = w.total();
    let _ = writeln!(out, "| **total** | | | | **{}** | | **{total}** |\n", w.table_wru());
    let _ = writeln!(out, "| function | WRU per delivered alert |\n|---|---|");
    for f in ["intake", "sender", "status"] {
        let _ = writeln!(out, "| {f} | {} |", w.of_function(f));
    }
    for i in &w.indexes {
        let _ = writeln!(out, "| of which GSI `{}` | {} |", i.name, w.of_index(&i.name));
    }
    let _ = writeln!(out, "| **all** | **{total}** |\n");
    let _ = writeln!(out, "Final state: `{}`.", w.final_state);
    if w.mismatches.is_empty() {
        let _ = writeln!(out, "Computed item images agree with the emulator's items after every phase.\n");
    } else {
        let _ = writeln!(
            out,
            "**Computed images differ from the emulator's** (the figures above may be off): {}.\n",
            w.mismatches.join("; ")
        );
    }
}

/// The cost lines as a table (its total row is the caller's, with what it adds); their sum.
fn cost_table(out: &mut String, lines: &[cost::CostLine]) -> f64 {
    let _ = writeln!(
        out,
        "| item | per alert | unit price (USD) | per 1M alerts (USD) | quantity from |\n|---|---|---|---|---|"
    );
    for l in lines {
        let _ = writeln!(
            out,
            "| {} | {:.9} {} | {:.10} | {:.2} | {} |",
            l.item,
            l.per_alert,
            l.unit,
            l.unit_price,
            l.per_million(),
            l.source
        );
    }
    cost::total(lines)
}
