//! BENCHMARKS.md section 12: acknowledgement by reply (`replies`).

use std::fmt::Write;

use crate::replies::{REPLIES, RepliesRun, TARGET_P90};
use crate::report::{Report, Row, error_line, verdict};
use crate::stats::ms;

impl Report {
    pub(crate) fn replies_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let Some(run) = &self.replies else { return };
        let _ = writeln!(out, "## 12. Acknowledgement by reply (measured on the emulator)\n");
        let _ = writeln!(
            out,
            "Method (`tests/bench/src/replies.rs`): a stack with `Replies=on` (End User Messaging, storm mode off) \
             sends one alert to each of {n} phones (+1 warm-up); each person texts the code their SMS shows; the \
             stand-in publishes the reply to the stack's replies topic and moto's SNS delivers it to the replies \
             queue; the replies handler (real adapters, in-process) takes it as a batch of one and acknowledges the \
             alert, closes its code, claims and sends the confirmation. Measured per reply: the handler's wall time \
             (the queue message to the acknowledgement recorded and the confirmation accepted), this process's CPU \
             time, every AWS call (moto's request recorder; the confirmation's `SendTextMessage` from the stand-in's \
             log); every other reply is watched instead, the ledger read in a loop beside the handler until the \
             acknowledgement shows (the first figure; those reads would count as the handler's calls). Not in the figures: on AWS, End User Messaging → SNS → SQS and the event source mapping's poll \
             come before the handler. The acknowledgement is written before the confirmation is sent; a \
             confirmation the origination number's parts per second refuse (a toll-free number's are 3, and \
             these replies come one after another) waits 1, 2, 4 s before it is sent again: the handler's wall \
             time holds that wait, the acknowledgement does not.\n",
            n = REPLIES
        );
        let r: &RepliesRun = match run {
            Ok(r) => r,
            Err(e) => {
                error_line(out, "acknowledgement by reply", e);
                return;
            }
        };
        let _ = writeln!(out, "| figure | value |\n|---|---|");
        let _ = writeln!(out, "| replies measured | {} |", r.replies);
        let _ = writeln!(
            out,
            "| reply → acknowledgement recorded, median / p90 / p99 ({} watched replies) | {} / {} / {} ms |",
            r.to_acknowledged.runs,
            ms(r.to_acknowledged.median),
            ms(r.to_acknowledged.p90),
            ms(r.to_acknowledged_p99)
        );
        let _ = writeln!(
            out,
            "| handler wall time per reply (the confirmation's send included), median / p90 | {} / {} ms |",
            ms(r.wall.median),
            ms(r.wall.p90)
        );
        let _ = writeln!(out, "| CPU time per reply (this process) | {} ms |", ms(r.cpu_per_reply));
        let _ = writeln!(out, "| AWS calls per acknowledged alert | {:.1} |", r.calls_total());
        for (op, n) in &r.calls {
            let _ = writeln!(out, "| · `{op}` | {n:.1} |");
        }
        let _ = writeln!(out, "| write units per acknowledged alert (≥ 1 per item written) | {:.1} |", r.write_units);
        let _ = writeln!(out, "| read units per acknowledged alert (consistent, items < 4 KB) | {:.1} |", r.read_units);
        let _ = writeln!(out, "| confirmation SMS per acknowledged alert | {:.1} |", r.confirmations);
        let (aws, sms) = r.cost_per_million();
        let _ = writeln!(
            out,
            "| cost per million acknowledged alerts: Lambda + DynamoDB + SQS / the confirmations (US, one part) | {aws:.2} USD / {sms:.0} USD |\n"
        );
        let _ = writeln!(
            out,
            "Reading: the confirmation is what an acknowledgement costs (an SMS part); the rest is a few cents \
             per thousand. The writes: the acknowledgement (the intent and its observation, one transaction), the \
             code closed, the confirmation claimed, the SMS spend meter counted.\n"
        );
        rows.push((
            "Reply → acknowledgement recorded, p90 (emulator)".into(),
            format!("≤ {} ms", TARGET_P90.as_millis()),
            format!("{} ms", ms(r.to_acknowledged.p90)),
            verdict(r.to_acknowledged.p90 <= TARGET_P90).into(),
        ));
    }
}
