//! `tocsin show <key>`: one intent and its timeline.

use chrono::Utc;
use serde::Serialize;
use tocsin::domain::observation::Observation;
use tocsin::ports::{DigestStore, IntentStore};

use super::{IntentView, load, resolve_key};
use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct TimelineEntry<'a> {
    #[serde(flatten)]
    observation: &'a Observation,
    summary: String,
}

/// The storm-mode digest whose SMS covered the intent: its reference and every member.
#[derive(Debug, Serialize)]
struct DigestView {
    id: String,
    /// What the SMS printed as `ref`.
    reference: String,
    segments: u32,
    /// Earliest deadline first; the intent shown is one of them.
    members: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ShowDocument<'a> {
    intent: IntentView,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<DigestView>,
    timeline: Vec<TimelineEntry<'a>>,
}

pub async fn run(ctx: &Context, raw_key: &str) -> CliResult<()> {
    let key = resolve_key(ctx, raw_key).await?;
    let record = load(ctx, &key).await?;
    let timeline =
        ctx.ledger.observations(&key).await.map_err(CliError::port(format!("reading the timeline of {key}")))?;
    let digest = match &record.status.digest_id {
        Some(id) => {
            let stored =
                ctx.ledger.get_digest(id).await.map_err(CliError::port(format!("reading digest {}", id.short())))?;
            Some(DigestView {
                id: id.to_string(),
                reference: id.short().to_owned(),
                segments: stored.as_ref().map_or(0, |d| d.segments),
                members: stored.map(|d| d.members.iter().map(ToString::to_string).collect()).unwrap_or_default(),
            })
        }
        None => None,
    };
    let view = IntentView::from(&record);
    let entries: Vec<TimelineEntry<'_>> =
        timeline.iter().map(|o| TimelineEntry { observation: o, summary: o.summary() }).collect();
    if ctx.json {
        return output::json(&ShowDocument { intent: view, digest, timeline: entries });
    }
    output::line(intent_table(&view))?;
    if let Some(d) = &digest {
        let siblings: Vec<String> =
            d.members.iter().filter(|m| **m != view.key).map(|m| format!("{}…", &m[..12.min(m.len())])).collect();
        output::line(format!(
            "Sent in storm-mode digest ref {} ({} alerts in one SMS of {} part(s)); the others: {}",
            d.reference,
            d.members.len(),
            d.segments,
            if siblings.is_empty() { "(digest record expired)".to_owned() } else { siblings.join(", ") }
        ))?;
    }
    let mut t = output::table(["time", "state after", "what happened"]);
    for e in &entries {
        t.add_row([
            output::time(e.observation.at),
            e.observation.state_after.map_or_else(|| "—".to_owned(), |s| s.to_string()),
            e.summary.clone(),
        ]);
    }
    output::line(format!("Timeline, oldest first ({} observations):", entries.len()))?;
    output::line(t)
}

fn intent_table(v: &IntentView) -> comfy_table::Table {
    let now = Utc::now();
    let mut rows = vec![
        ("key", v.key.clone()),
        ("event id", v.event_id.clone()),
        ("template", v.template.clone()),
        ("recipient", v.recipient.clone()),
        ("origin", v.origin.to_owned()),
        ("producer", v.producer.clone().unwrap_or_else(|| "— (submitted before producers were named)".to_owned())),
        ("created", output::time(v.created_at)),
        ("deadline", output::time_relative(v.deadline, now)),
        ("state", v.state.to_string()),
        ("attempts", v.attempts.to_string()),
        ("SNS message id", output::opt(v.sns_message_id.as_deref())),
        ("SMS settings", v.sms.describe()),
    ];
    if let Some(a) = &v.attempt_id {
        let until =
            v.lease_until.map_or_else(String::new, |l| format!(", lease until {}", output::time_relative(l, now)));
        rows.push(("claimed by", format!("{a}{until}")));
    }
    rows.push((
        "escalation",
        v.escalation
            .as_ref()
            .map_or_else(|| "not escalated".to_owned(), |e| format!("{} — {}", output::time(e.at), e.reason)),
    ));
    rows.push((
        "acknowledged",
        v.acknowledgement
            .as_ref()
            .map_or_else(|| "no".to_owned(), |a| format!("{} by {} ({})", output::time(a.at), a.by, a.via.as_str())),
    ));
    if let Some(e) = &v.last_error {
        rows.push(("last error", e.clone()));
    }
    if v.conflicts > 0 {
        rows.push(("conflicting receipts", v.conflicts.to_string()));
    }
    output::fields(&rows)
}
