//! `tocsin`: parse the command line, build the AWS clients once, run the command.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use tocsin_cli::args::Cli;
use tocsin_cli::context::Context;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(stack) = cli.stack.as_deref() else {
        Cli::command()
            .error(clap::error::ErrorKind::MissingRequiredArgument, "--stack <NAME> is required (or set TOCSIN_STACK)")
            .exit()
    };
    let result = match Context::connect(stack, cli.json).await {
        Ok(ctx) => tocsin_cli::dispatch(&ctx, &cli.command).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tocsin_cli::report(&e, cli.json);
            ExitCode::from(e.exit_code())
        }
    }
}
