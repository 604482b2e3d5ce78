//! The `sandboxd` binary: `serve` runs the service; the other verbs are a
//! small client for people and scripts. What only the binary uses lives
//! under `cli`; this file parses the command line, starts the runtime the
//! verb needs and dispatches.

mod cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cli::{Cli, Command};

fn main() -> ExitCode {
    let args = Cli::parse();
    if matches!(args.command, Command::Idle | Command::Supervise { .. }) {
        // These two live in every session's container for as long as it
        // does: the heap the command line's parsing used goes back to the
        // kernel (about 0.4 MiB each, per session).
        release_free_heap();
    }
    if matches!(args.command, Command::Idle) {
        // The container's main process only waits: no runtime.
        idle();
    }
    // The in-container supervisor relays frames and waits on children: one
    // thread does it with the least latency and the fewest pids.
    let runtime = if matches!(args.command, Command::Supervise { .. }) {
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
    let code = runtime.block_on(run(args));
    // A blocking read of stdin (`mcp`) never ends by itself: do not wait
    // for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Runs the parsed command line.
async fn run(args: Cli) -> ExitCode {
    cli::warn_token_on_command_line();
    let result = match args.command {
        Command::Serve(serve) => cli::serve::serve(*serve, args.token).await,
        Command::Image(image) => cli::image::run(image).await,
        Command::Demo => cli::demo::run().await,
        Command::Bench(bench) => cli::bench::run(bench).await,
        Command::Mcp(mcp) => cli::mcp::run(*mcp, &args.target, args.token).await,
        Command::Idle => idle(),
        Command::Supervise {
            connect,
            user,
            workspace_identity,
        } => sandboxd::sandbox::supervisor::inside::supervise(connect, user, workspace_identity)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Client(verb) => cli::client::run(args.target, args.token, verb).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(cli::EXIT_FAILURE)
        }
    }
}

/// What a session container's main process does: wait until it is killed.
fn idle() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Gives the heap's free pages back to the kernel.
fn release_free_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
