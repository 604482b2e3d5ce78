//! The `sandboxd` binary: `serve` runs the service; the other verbs are a
//! small client for people and scripts.

mod bench;
mod cli;
mod demo;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(cli::EXIT_FAILURE);
        }
    };
    runtime.block_on(cli::run(args))
}
