//! `tocsin`, the operator CLI: reads the ledger, the recipient registry and the escalation queue
//! of one deployed stack, and performs the two audited operator actions (re-enable a recipient,
//! resend an intent) through the same adapters and conditional writes as the functions.
//!
//! It reaches AWS — or a local emulator — only through the standard AWS environment; there is no
//! local code path. Every resource it uses comes from the stack's CloudFormation outputs. See `README.md` next to this crate.

pub mod args;
pub mod commands;
pub mod context;
pub mod error;
pub mod output;
pub mod progress;

use args::{BreakerAction, CarriersAction, ChainsAction, Command, EscalationsAction, RecipientsAction};
use context::Context;
use error::{CliError, CliResult, exit};
use tocsin::adapters::roster::RosterChange;

/// Runs one command; the exit code of a command that completed.
pub async fn dispatch(ctx: &Context, command: &Command) -> CliResult<u8> {
    match command {
        Command::Show { key } => commands::show::run(ctx, key).await.map(|()| exit::OK),
        Command::Ack { key } => commands::ack::run(ctx, key).await.map(|()| exit::OK),
        Command::List { state, limit, days } => {
            commands::list::run(ctx, *state, *limit, *days).await.map(|()| exit::OK)
        }
        Command::Suppressed { reveal } => commands::suppressed::run(ctx, *reveal).await.map(|()| exit::OK),
        Command::ReEnable { number, reason, opt_in } => {
            commands::re_enable::run(ctx, number, reason, *opt_in).await.map(|()| exit::OK)
        }
        Command::Recipients { action: None, reveal } => {
            commands::recipients::list(ctx, *reveal).await.map(|()| exit::OK)
        }
        Command::Recipients { action: Some(RecipientsAction::Allow { entry, reason }), .. } => {
            commands::recipients::change(ctx, RosterChange::Allow, entry, reason).await.map(|()| exit::OK)
        }
        Command::Recipients { action: Some(RecipientsAction::Remove { entry, reason }), .. } => {
            commands::recipients::change(ctx, RosterChange::Remove, entry, reason).await.map(|()| exit::OK)
        }
        Command::Chains { action: None, reveal } => commands::chains::list(ctx, *reveal).await.map(|()| exit::OK),
        Command::Chains { action: Some(ChainsAction::Set { template, chain, reason }), .. } => {
            commands::chains::set(ctx, template, chain, reason).await.map(|()| exit::OK)
        }
        Command::Chains { action: Some(ChainsAction::Remove { template, reason }), .. } => {
            commands::chains::remove(ctx, template, reason).await.map(|()| exit::OK)
        }
        Command::Chains { action: Some(ChainsAction::History), reveal } => {
            commands::chains::history(ctx, *reveal).await.map(|()| exit::OK)
        }
        Command::Breaker { action: None } => commands::breaker::show(ctx).await.map(|()| exit::OK),
        Command::Breaker { action: Some(BreakerAction::Resume { reason }) } => {
            commands::breaker::resume(ctx, reason).await.map(|()| exit::OK)
        }
        Command::Resend(a) => commands::resend::run(ctx, a)
            .await
            .map(|outcome| if outcome.accepted() { exit::OK } else { exit::NOT_ACCEPTED }),
        Command::Escalations { action: None, max, ack, reason } => {
            let ack = if *ack { reason.as_deref() } else { None };
            commands::escalations::run(ctx, *max, ack).await.map(|()| exit::OK)
        }
        Command::Escalations { action: Some(EscalationsAction::Ack { key, reason }), .. } => {
            commands::escalations::ack(ctx, key, reason).await.map(|()| exit::OK)
        }
        Command::Carriers { action: None, delayed_after } => {
            commands::carriers::show(ctx, *delayed_after).await.map(|()| exit::OK)
        }
        Command::Carriers { action: Some(CarriersAction::Hold { name, reason, duration }), .. } => {
            commands::carriers::hold(ctx, name, reason, *duration).await.map(|()| exit::OK)
        }
        Command::Carriers { action: Some(CarriersAction::Release { name, reason }), .. } => {
            commands::carriers::release(ctx, name, reason).await.map(|()| exit::OK)
        }
        Command::Send(a) => commands::send::run(ctx, a).await,
        Command::Doctor(a) => commands::doctor::run(ctx, a).await,
        // Needs no stack: main.rs runs it before connecting to one.
        Command::Preflight(_) => Err(error::CliError::Usage("preflight runs without a stack".into())),
        Command::Reconcile { key, link, reason, margin } => {
            commands::reconcile::run(ctx, key, link.as_deref(), reason.as_deref(), *margin).await.map(|()| exit::OK)
        }
    }
}

/// Reports an error: always in words on stderr; with `--json` also as a JSON document on stdout.
pub fn report(e: &CliError, json: bool) {
    eprintln!("tocsin: {e}");
    if json {
        let doc = serde_json::json!({"error": {"kind": e.kind(), "message": e.to_string()}});
        let _ = output::json(&doc);
    }
}
