//! `tocsin show <key>`: one intent and its timeline; for a level of an escalation chain, every
//! level of the chain — who was texted, what the carrier said, who acknowledged, how and when.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tocsin::domain::State;
use tocsin::domain::acknowledgement::Acknowledgement;
use tocsin::domain::chain::{Chain, PolicyRef, level_key};
use tocsin::domain::intent::Escalation;
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

/// One level of the alert's escalation chain, as the ledger has it now.
#[derive(Debug, Serialize)]
struct LevelView {
    level: u8,
    key: String,
    /// The level's phone, masked.
    to: String,
    wait_s: u64,
    /// `None`: not started (nobody needed it, or not yet).
    state: Option<State>,
    delivered_at: Option<DateTime<Utc>>,
    acknowledgement: Option<Acknowledgement>,
    /// When the chain moved on from this level, and why (the next level texted, or on-call paged).
    moved_on: Option<Escalation>,
}

#[derive(Debug, Serialize)]
struct ShowDocument<'a> {
    intent: IntentView,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<DigestView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chain: Option<Vec<LevelView>>,
    /// The template policy the chain came from (absent: the request named it).
    #[serde(skip_serializing_if = "Option::is_none")]
    chain_policy: Option<PolicyRef>,
    timeline: Vec<TimelineEntry<'a>>,
}

/// Every level of `chain`, read from the ledger (the root's, and each started level's own item).
async fn chain_levels(ctx: &Context, chain: &Chain) -> CliResult<Vec<LevelView>> {
    let mut out = Vec::new();
    for (i, level) in chain.levels.iter().enumerate() {
        let n = u8::try_from(i).unwrap_or(u8::MAX);
        let key = if n == 0 { chain.root.clone() } else { level_key(&chain.root, n) };
        let stored = ctx.ledger.get(&key).await.map_err(CliError::port(format!("reading chain level {n}")))?;
        let status = stored.map(|r| r.status);
        out.push(LevelView {
            level: n,
            key: key.to_string(),
            to: level.to.masked(),
            wait_s: level.wait_s,
            state: status.as_ref().map(|s| s.state),
            delivered_at: status.as_ref().filter(|s| s.state == State::Delivered).and_then(|s| s.final_at),
            acknowledgement: status.as_ref().and_then(|s| s.acknowledgement.clone()),
            moved_on: status.and_then(|s| s.escalation),
        });
    }
    Ok(out)
}

fn chain_table(levels: &[LevelView]) -> comfy_table::Table {
    let mut t = output::table(["level", "to", "wait", "state", "delivered", "acknowledged", "moved on"]);
    for l in levels {
        t.add_row([
            l.level.to_string(),
            l.to.clone(),
            humantime::format_duration(std::time::Duration::from_secs(l.wait_s)).to_string(),
            l.state.map_or_else(|| "not started".to_owned(), |s| s.to_string()),
            l.delivered_at.map_or_else(|| "—".to_owned(), output::time),
            l.acknowledgement
                .as_ref()
                .map_or_else(|| "—".to_owned(), |a| format!("{} by {} ({})", output::time(a.at), a.by, a.via.as_str())),
            l.moved_on.as_ref().map_or_else(
                || "—".to_owned(),
                |e| match e.to_level {
                    Some(n) => format!("{} → level {n}", output::time(e.at)),
                    None => format!("{} → on-call paged", output::time(e.at)),
                },
            ),
        ]);
    }
    t
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
    let chain = match &record.intent.chain {
        Some(c) => Some(chain_levels(ctx, c).await?),
        None => None,
    };
    let chain_policy = record.intent.chain.as_ref().and_then(|c| c.policy.clone());
    let view = IntentView::from(&record);
    let entries: Vec<TimelineEntry<'_>> =
        timeline.iter().map(|o| TimelineEntry { observation: o, summary: o.summary() }).collect();
    if ctx.json {
        return output::json(&ShowDocument { intent: view, digest, chain, chain_policy, timeline: entries });
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
    if let Some(levels) = &chain {
        let from = match &chain_policy {
            Some(p) => format!("template {}'s policy, as set {}", p.template, output::time(p.set_at)),
            None => "named by the request".to_owned(),
        };
        output::line(format!("Escalation chain ({} levels, then on-call; {from}):", levels.len()))?;
        output::line(chain_table(levels))?;
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
