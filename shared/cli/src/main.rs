//! `tocsin`: parse the command line, read the stack's outputs and build the AWS clients once, run
//! the command.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use tocsin_cli::args::Cli;
use tocsin_cli::context::{Connection, Context};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(stack) = cli.stack.clone() else {
        Cli::command()
            .error(clap::error::ErrorKind::MissingRequiredArgument, "--stack <NAME> is required (or set TOCSIN_STACK)")
            .exit()
    };
    let connection = Connection { stack, profile: cli.profile.clone(), region: cli.region.clone() };
    let result = match Context::connect(&connection, cli.json).await {
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
