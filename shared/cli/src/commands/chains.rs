//! `tocsin chains [set TEMPLATE --chain JSON --reason … | remove TEMPLATE --reason … | history]`:
//! the templates' escalation chains (`tocsin::domain::chain_policy`) — the chain an alert of a
//! template gets when its request names none. A chain is checked as intake checks a request's
//! (waits, repeats, at most 5 people and 12 levels), and under `RecipientPolicy=roster` everyone
//! it names must be on the roster. Every change is written with its audit event (who: your AWS
//! identity, why, when) in one transaction; intake reads the policies again at most a minute
//! later. Alerts already accepted keep the chain they were accepted with.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tocsin::adapters::chain_policies::PolicyChange;
use tocsin::domain::chain::parse_chain_shape;
use tocsin::domain::chain_policy::ChainPolicy;
use tocsin::domain::template::Catalog;
use tocsin::ports::RecipientRoster;

use crate::context::Context;
use crate::error::{CliError, CliResult};
use crate::output;

#[derive(Debug, Serialize)]
struct PolicyView {
    template: String,
    /// Each level and its wait, numbers masked unless `--reveal`.
    chain: String,
    set_by: String,
    reason: String,
    set_at: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
struct Changed<'a> {
    change: PolicyChange,
    template: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    chain: Option<String>,
    operator: &'a str,
    reason: &'a str,
    at: DateTime<Utc>,
}

/// A stored chain in one line; one that no longer parses says so (intake skips it).
fn summary(chain: &Value, reveal: bool) -> String {
    match parse_chain_shape(chain) {
        Ok(shape) => shape.summary(reveal),
        Err(_) => "(not a valid chain: intake ignores it; set it again)".to_owned(),
    }
}

/// Lists every template's chain.
pub async fn list(ctx: &Context, reveal: bool) -> CliResult<()> {
    let listed = ctx.registry.chain_policies_listed().await.map_err(CliError::port("reading the chain policies"))?;
    let views: Vec<PolicyView> = listed
        .into_iter()
        .map(|p| PolicyView {
            chain: summary(&p.chain, reveal),
            template: p.template,
            set_by: p.set_by,
            reason: p.reason,
            set_at: p.set_at,
        })
        .collect();
    if ctx.json {
        return output::json(&views);
    }
    if views.is_empty() {
        return output::line(
            "no template has a chain: an alert whose request names none goes to its recipient, then on-call \
             (tocsin chains set …)",
        );
    }
    let mut t = output::table(["template", "chain", "set by", "when", "why"]);
    for v in &views {
        t.add_row([v.template.clone(), v.chain.clone(), v.set_by.clone(), output::time(v.set_at), v.reason.clone()]);
    }
    output::line(t)?;
    let hint = if reveal { "" } else { " (numbers masked; --reveal shows them)" };
    output::line(format!("{}{hint}", output::count(views.len(), "template chain")))
}

/// Sets `template`'s chain, audited, after checking it as intake checks a request's chain and
/// (under `RecipientPolicy=roster`) that everyone it names is on the roster.
pub async fn set(ctx: &Context, template: &str, raw: &str, reason: &str) -> CliResult<()> {
    let template = template.trim();
    let spec: Value = serde_json::from_str(raw)
        .map_err(|e| CliError::Usage(format!("--chain is not JSON ({e}): give it as a request's chain, e.g. '{{\"wait\": \"5m\", \"then\": [{{\"to\": \"+14155550101\", \"wait\": \"10m\"}}]}}'")))?;
    let at = Utc::now();
    let policy =
        ChainPolicy::parse(template, &spec, at, Catalog::builtin()).map_err(|e| CliError::Usage(e.to_string()))?;
    if ctx.outputs.parameter_as_deployed("RecipientPolicy") != Some("open") {
        let roster = ctx.registry.roster().await.map_err(CliError::port("reading the recipients roster"))?;
        let off: Vec<String> = policy
            .shape
            .people()
            .enumerate()
            .filter(|(_, p)| roster.entry_for(p).is_none())
            .map(|(i, p)| format!("chain.then[{i}].to ({})", p.masked()))
            .collect();
        if !off.is_empty() {
            return Err(CliError::Refused(format!(
                "not on the recipients roster: {}; the stack may not text them (tocsin recipients allow …): nothing changed",
                off.join(", ")
            )));
        }
    }
    let operator = ctx.operator().await?;
    ctx.registry
        .set_chain_policy(&policy, &operator, reason)
        .await
        .map_err(CliError::port(format!("setting template {template}'s chain")))?;
    let chain = policy.shape.summary(false);
    if ctx.json {
        let changed =
            Changed { change: PolicyChange::Set, template, chain: Some(chain), operator: &operator, reason, at };
        return output::json(&changed);
    }
    output::line(format!(
        "template {template}'s chain set by {operator} at {} ({reason}): {chain}; intake uses it within a minute \
         for alerts whose request names no chain",
        output::time(at)
    ))
}

/// Removes `template`'s chain, audited.
pub async fn remove(ctx: &Context, template: &str, reason: &str) -> CliResult<()> {
    let template = template.trim();
    let operator = ctx.operator().await?;
    let at = Utc::now();
    let removed = ctx
        .registry
        .remove_chain_policy(template, &operator, reason, at)
        .await
        .map_err(CliError::port(format!("removing template {template}'s chain")))?;
    if !removed {
        return Err(CliError::Refused(format!("template {template} has no chain: nothing changed")));
    }
    if ctx.json {
        let changed = Changed { change: PolicyChange::Remove, template, chain: None, operator: &operator, reason, at };
        return output::json(&changed);
    }
    output::line(format!(
        "template {template}'s chain removed by {operator} at {} ({reason}); within a minute its alerts go to \
         their recipient, then on-call, unless the request names a chain",
        output::time(at)
    ))
}

/// Every change, oldest first.
pub async fn history(ctx: &Context, reveal: bool) -> CliResult<()> {
    let events =
        ctx.registry.chain_policy_history().await.map_err(CliError::port("reading the chain policies' history"))?;
    if ctx.json {
        let views: Vec<Changed<'_>> = events
            .iter()
            .map(|e| Changed {
                change: e.change,
                template: &e.template,
                chain: (!e.chain.is_null()).then(|| summary(&e.chain, reveal)),
                operator: &e.operator,
                reason: &e.reason,
                at: e.at,
            })
            .collect();
        return output::json(&views);
    }
    if events.is_empty() {
        return output::line("no template's chain was ever set (or the changes are older than 400 days)");
    }
    let mut t = output::table(["when", "change", "template", "chain", "by", "why"]);
    for e in &events {
        let change = match e.change {
            PolicyChange::Set => "set",
            PolicyChange::Remove => "removed",
        };
        let chain = if e.chain.is_null() { "—".to_owned() } else { summary(&e.chain, reveal) };
        t.add_row([
            output::time(e.at),
            change.to_owned(),
            e.template.clone(),
            chain,
            e.operator.clone(),
            e.reason.clone(),
        ]);
    }
    output::line(t)
}
