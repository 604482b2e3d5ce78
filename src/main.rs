//! The `sandboxd` binary: `serve` runs the service; the other verbs are a
//! small client for people and scripts.

mod cli;
mod local;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // The in-container supervisor relays frames and waits on children: one
    // thread does it with the least latency and the fewest pids.
    let runtime = if args.is_supervisor() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(cli::EXIT_FAILURE);
        }
    };
    runtime.block_on(cli::run(args))
}
