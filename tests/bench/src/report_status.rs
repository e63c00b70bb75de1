//! BENCHMARKS.md section 8: the status function's throughput per instance, CPU-bound, with its
//! AWS calls counted (`status_rate`).

use std::fmt::Write;

use crate::report::{Report, Row, error_line, truncate};
use crate::stats::ms;
use crate::status_rate::{self, StatusRate};

fn calls_text<K: std::fmt::Display>(calls: impl Iterator<Item = (K, usize)>) -> String {
    calls.map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ")
}

impl Report {
    pub(crate) fn status_rate_section(&self, out: &mut String, rows: &mut Vec<Row>) {
        let _ = writeln!(out, "## 8. Status throughput per instance\n");
        let _ = writeln!(
            out,
            "Method (`tests/bench/src/status_rate.rs`): against the emulator every call is a local moto request, \
             one at a time, so a status run's time there is mostly the emulator's (section 2); the handler's own \
             cost is measured without it. The real `status::StatusHandler` — generic over its ports — \
             runs with benchmark-only ports that answer at once and count the DynamoDB calls the adapters would make \
             (one `BatchGetItem` per 100 message ids, an `UpdateItem` (the state, carrying its observation) per applied record, one `BatchWriteItem` per \
             25 orphans, one `TransactWriteItems` per suppression), on a current-thread runtime as in the function, the \
             event handed over as the JSON text the runtime receives and parsed from it. One warm-up run, then {} \
             measured; median. Each run's handler is as a new instance's (every record is to a number it has not \
             written the carrier of: one carrier `UpdateItem` per delivery record, the most there can be). CPU time is the process's, all threads (the payload decoder runs on a blocking \
             thread). `TOCSIN_ORPHAN_WAIT` as deployed (2 s); the records are an hour old, so none waits. The \
             handler's EMF lines (one per record) are formatted and discarded rather than written to stdout. \
             Records/s per instance at the deployed memory = records ÷ (CPU time ÷ the memory's vCPU share): an \
             assumption that the handler gets exactly its share (1 vCPU at {:.0} MB, in proportion below) and \
             waits for nothing — AWS's call latencies are not in it (the handler overlaps up to 16 records' calls), \
             nor is the adapters' own work per call (request building, SigV4, HTTP, TLS, parsing the answer), which \
             the second table measures on the real binary.\n",
            status_rate::RUNS,
            crate::cold_start::MB_PER_VCPU
        );
        let Some(r) = &self.status_rate else { return };
        let r: &StatusRate = match r {
            Ok(r) => r,
            Err(e) => {
                error_line(out, "status throughput", e);
                rows.push((
                    "8. status records/s per instance (CPU-bound)".into(),
                    "report".into(),
                    "not measured".into(),
                    "—".into(),
                ));
                return;
            }
        };
        let share = r.memory_mb.map(crate::cold_start::cpu_share);
        let memory = r.memory_mb.map(|m| m.to_string()).unwrap_or_else(|| "?".into());
        let _ = writeln!(
            out,
            "| records are | records | event | CPU per invocation (median) | wall (median) | CPU per record | AWS calls (per invocation) | calls per record | records/s per vCPU | records/s at {memory} MB |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        let mut summary = Vec::new();
        for w in &r.workloads {
            let per_vcpu = w.records as f64 / w.cpu.as_secs_f64().max(1e-9);
            let at_memory = share.map(|s| per_vcpu * s);
            let _ = writeln!(
                out,
                "| {} | {} | {:.3} MB | {} ms | {} ms | {:.2} µs | {} | {:.2} | {:.0} | {} |",
                w.name,
                w.records,
                w.event_bytes as f64 / 1e6,
                ms(w.cpu),
                ms(w.wall),
                w.cpu_per_record().as_secs_f64() * 1e6,
                calls_text(w.calls.iter().map(|(k, v)| (*k, *v))),
                w.calls_per_record(),
                per_vcpu,
                at_memory.map(|x| format!("**{x:.0}**")).unwrap_or_else(|| "—".into())
            );
            if let Some(x) = at_memory {
                summary.push(format!("{x:.0}/s ({})", w.name.split(' ').next().unwrap_or_default()));
            }
        }
        let _ = writeln!(out, "\nSummaries of the last run: {}.\n", {
            r.workloads.iter().map(|w| format!("`{}`", truncate(&w.summary, 200))).collect::<Vec<_>>().join("; ")
        });
        match &r.emulated {
            Ok(e) => {
                let per_record = e.cpu / e.records.max(1) as u32;
                let total: usize = e.calls.values().sum();
                let per_vcpu = e.records as f64 / e.cpu.as_secs_f64().max(1e-9);
                let _ = writeln!(
                    out,
                    "With the adapters' work: the real status binary (release) on a {}-record event of other \
                     applications' SMS (hour-old records, as the first row), against the emulator over plain HTTP \
                     (no TLS), its process's CPU time (all threads) from its first `GET /next` to its answer, its \
                     calls recorded by the emulator.\n\n\
                     | records | CPU (all threads) | wall (emulator-bound) | CPU per record | AWS calls | calls per record | records/s per vCPU | records/s at {memory} MB | answer |\n|---|---|---|---|---|---|---|---|---|\n\
                     | {} | {} ms | {} ms | {:.1} µs | {} | {:.2} | {:.0} | **{}** | `{}` |\n",
                    e.records,
                    e.records,
                    ms(e.cpu),
                    ms(e.wall),
                    per_record.as_secs_f64() * 1e6,
                    calls_text(e.calls.iter().map(|(k, v)| (k.as_str(), *v))),
                    total as f64 / e.records.max(1) as f64,
                    per_vcpu,
                    share.map(|s| format!("{:.0}", per_vcpu * s)).unwrap_or_else(|| "—".into()),
                    truncate(&e.answer, 160).replace('|', "\\|")
                );
                if let Some(s) = share {
                    let rate = per_vcpu * s;
                    summary.push(format!("{rate:.0}/s with the SDK's work (real binary, plain HTTP)"));
                    let in_memory = r.workloads.first().map(|w| w.cpu_per_record()).unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "The adapters' work is most of a record's CPU: {:.1} µs per record with them against {:.1} µs \
                         without (the first table's first row, the same records). At {rate:.0} records/s, one \
                         invocation of the template's {} s timeout handles about {:.0} records from CPU alone; the \
                         ~1 MB event's {} records would take about {:.0} s of it.\n",
                        per_record.as_secs_f64() * 1e6,
                        in_memory.as_secs_f64() * 1e6,
                        r.timeout_s.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
                        rate * r.timeout_s.unwrap_or(0) as f64,
                        r.workloads.first().map(|w| w.records).unwrap_or_default(),
                        r.workloads.first().map(|w| w.records).unwrap_or_default() as f64 / rate.max(1e-9)
                    );
                }
            }
            Err(e) => {
                let _ =
                    writeln!(out, "> **Not measured** (real binary against the emulator): `{}`\n", truncate(e, 400));
            }
        }
        rows.push((
            "8. status records/s per instance (CPU-bound)".into(),
            "report".into(),
            format!("at {memory} MB: {}", summary.join(" · ")),
            "reported".into(),
        ));
    }
}
