//! `tocsin`: parse the command line, read the stack's outputs and build the AWS clients once, run
//! the command.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use tocsin_cli::args::Cli;
use tocsin_cli::context::{Connection, Context};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let tocsin_cli::args::Command::Preflight(args) = &cli.command {
        // Before the first deploy: the account, and a stack only when one is named.
        let result = preflight(&cli, args).await;
        return finish(result, cli.json);
    }
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
    finish(result, cli.json)
}

async fn preflight(cli: &Cli, args: &tocsin_cli::args::PreflightArgs) -> tocsin_cli::error::CliResult<u8> {
    let sdk = tocsin_cli::context::load_sdk(cli.profile.as_deref(), cli.region.as_deref()).await?;
    let stack = match &cli.stack {
        Some(name) => {
            let cfn = aws_sdk_cloudformation::Client::new(&sdk);
            Some(tocsin_cli::context::StackOutputs::describe(&cfn, name).await?)
        }
        None => None,
    };
    tocsin_cli::commands::preflight::run(&sdk, args, stack.as_ref(), cli.json).await
}

fn finish(result: tocsin_cli::error::CliResult<u8>, json: bool) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tocsin_cli::report(&e, json);
            ExitCode::from(e.exit_code())
        }
    }
}
