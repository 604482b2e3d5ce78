//! Running a client verb: connecting, making the verb's call and printing
//! its result; a streamed `run` exits with the command's own code.

use std::io::{Read as _, Write};
use std::process::ExitCode;

use sandboxd::pb;

use crate::cli::connect::Client;
use crate::cli::print::Stdio;
use crate::cli::terminal::Console;
use crate::cli::{AnyError, EXIT_FAILURE, connect, print, token};

use super::discover::Service;
use super::{SessionCommand, Target, Verb, export};

/// Exit code of `run` when the command timed out (as timeout(1) exits).
const EXIT_TIMED_OUT: u8 = 124;
/// What `run` exits with when the command's result is unknown (its
/// container was killed under it, or the link to its supervisor was lost):
/// never 0, and never a code the command itself could have chosen to look
/// like success.
const EXIT_UNKNOWN: u8 = 125;

/// Runs one client verb against `target` (or the service found on this
/// machine, if it is the user's own or root's), printing through a
/// [`Console`] over stdout and stderr. Without a token, the one a local
/// service made for exactly that address is sent, to that service alone
/// (see `token`).
pub async fn run(target: Target, token: Option<String>, verb: Verb) -> Result<ExitCode, AnyError> {
    let service = target.service().await;
    let (token, service) = match verb.token_from_file()? {
        Some(from_file) => (Some(from_file), service),
        None => match token {
            Some(given) => (Some(given), service),
            None => with_local_token(service),
        },
    };
    let mut con = Console::stdio();
    let code = match call(target, &service, token, verb, &mut con).await {
        Ok(code) => code,
        // Printed here, not by the caller: the error may echo what the
        // service sent, and it must start on a line of its own.
        Err(e) => {
            con.status(format_args!("error: {e}"));
            ExitCode::from(EXIT_FAILURE)
        }
    };
    con.finish()
        .map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(code)
}

/// The token a local service made for `service`'s address, if any, and
/// the service narrowed to that token's owner: the token goes to no other
/// listener, on any connection.
fn with_local_token(mut service: Service) -> (Option<String>, Service) {
    match token::found_token(&service.addr) {
        Some(found) => {
            service.trust = service.trust.carrying_token_of(found.owner, &found.dir);
            (Some(found.token), service)
        }
        None => (None, service),
    }
}

/// Connects, makes the verb's call and prints its result; a refusal prints
/// its reason and message.
async fn call(
    target: Target,
    service: &Service,
    token: Option<String>,
    verb: Verb,
    con: &mut Stdio,
) -> Result<ExitCode, AnyError> {
    // Calls about one session carry its own token when one is given.
    let token = match (&target.session_token, verb.acts_on_session()) {
        (Some(own), true) => Some(own.clone()),
        _ => token,
    };
    let mut c = connect::client(&service.addr, target.ca_cert(), token, &service.trust).await?;
    let session = target.session;
    let need_session = || {
        session
            .clone()
            .ok_or("no session: pass --session ID or set SANDBOXD_SESSION")
    };
    let outcome = match verb {
        Verb::Run {
            cwd,
            timeout_ms,
            env,
            cap,
            raw,
            command,
        } => {
            let req = pb::RunCommandRequest {
                session_id: need_session()?,
                command: command.join(" "),
                cwd,
                timeout_ms,
                env: env.into_iter().collect(),
                stdout_cap: cap,
                stderr_cap: cap,
                // The chunks are printed as they come: the exit need not
                // repeat them.
                output: pb::OutputMode::Chunks.into(),
            };
            match run_streaming(&mut c, req, raw, con).await {
                Ok(code) => return Ok(code),
                Err(status) => Err(status),
            }
        }
        Verb::Session(SessionCommand::Create {
            workspace,
            ttl,
            quiet,
            export,
            spec,
        }) => {
            let req = pb::CreateSessionRequest {
                workspace_path: workspace.unwrap_or_default(),
                ttl_seconds: ttl,
                ..spec.request()
            };
            let shown = match (quiet, export) {
                (true, _) => Created::Id,
                (_, true) => Created::Export,
                _ => Created::Described,
            };
            create_session(&mut c, req, shown, con).await?
        }
        Verb::Env(cmd) => crate::cli::env::call(&mut c, cmd, con).await,
        Verb::Process(verb) => {
            return crate::cli::process::call(&mut c, need_session()?, verb, con).await;
        }
        Verb::Diff {
            since,
            max_bytes,
            stat,
        } => {
            let diffed =
                crate::cli::checkpoint::diff(&mut c, need_session()?, since, max_bytes, stat, con)
                    .await;
            match diffed {
                Ok(crate::cli::checkpoint::Diffed::Cut) => return Ok(ExitCode::from(EXIT_FAILURE)),
                other => other.map(|_| ()),
            }
        }
        Verb::Checkpoint(cmd) => {
            crate::cli::checkpoint::call(&mut c, need_session()?, cmd, con).await
        }
        Verb::Upload { path, to } => {
            crate::cli::transfer::upload(&mut c, need_session()?, &path, to, con).await?
        }
        Verb::Download {
            path,
            output,
            gitignore,
            gzip,
        } => {
            let req = pb::DownloadArchiveRequest {
                session_id: need_session()?,
                path,
                gitignore,
                gzip,
                max_bytes: 0,
            };
            crate::cli::transfer::download(&mut c, req, output, con).await?
        }
        Verb::Apply { file } => {
            let applied = crate::cli::transfer::apply(&mut c, need_session()?, file).await?;
            if let Ok(r) = &applied {
                match &r.rejected {
                    Some(rejected) => {
                        print::rejection(con, rejected);
                        return Ok(ExitCode::from(EXIT_FAILURE));
                    }
                    None => con.out(format_args!("{}\n", r.message)),
                }
            }
            applied.map(drop)
        }
        Verb::Session(SessionCommand::Get { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.get_session(pb::GetSessionRequest { session_id })
                .await
                .map(|r| print::session(con, &r.into_inner()))
        }
        Verb::Session(SessionCommand::List) => c
            .list_sessions(pb::ListSessionsRequest {})
            .await
            .map(|r| print::sessions(con, &r.into_inner())),
        Verb::Session(SessionCommand::Reset { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.reset_sandbox(pb::ResetSandboxRequest { session_id })
                .await
                .map(|r| con.out(format_args!("{}\n", r.into_inner().message)))
        }
        Verb::Session(SessionCommand::Close { id }) => {
            let session_id = id.map_or_else(need_session, Ok)?;
            c.close_session(pb::CloseSessionRequest { session_id })
                .await
                .map(|r| con.out(format_args!("{}\n", r.into_inner().message)))
        }
        Verb::Read {
            path,
            offset,
            limit,
            raw,
        } => c
            .read_file(pb::ReadFileRequest {
                session_id: need_session()?,
                path,
                offset,
                limit,
            })
            .await
            .map(|r| print::read(con, &r.into_inner(), raw)),
        Verb::Create {
            path,
            content,
            from,
        } => {
            let content = match (content, from) {
                (Some(text), _) => text,
                (None, Some(file)) => std::fs::read_to_string(file)?,
                (None, None) => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text)?;
                    text
                }
            };
            let created = c
                .create_file(pb::CreateFileRequest {
                    session_id: need_session()?,
                    path,
                    content,
                })
                .await
                .map(tonic::Response::into_inner);
            if let Ok(r) = &created {
                print::created(con, r);
                if r.rejected.is_some() {
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
            }
            created.map(drop)
        }
        Verb::Edit {
            path,
            old,
            new,
            replace_all,
            expected_sha256,
        } => {
            if old.len() != new.len() {
                return Err(format!(
                    "{} --old but {} --new: give one --new per --old",
                    old.len(),
                    new.len()
                )
                .into());
            }
            let edits = old
                .into_iter()
                .zip(new)
                .map(|(old_string, new_string)| pb::Edit {
                    old_string,
                    new_string,
                    replace_all,
                })
                .collect();
            let edited = c
                .edit_file(pb::EditFileRequest {
                    session_id: need_session()?,
                    path,
                    edits,
                    expected_sha256: expected_sha256.unwrap_or_default(),
                })
                .await
                .map(tonic::Response::into_inner);
            if let Ok(r) = &edited {
                print::edited(con, r);
                if r.rejected.is_some() {
                    return Ok(ExitCode::from(EXIT_FAILURE));
                }
            }
            edited.map(drop)
        }
        Verb::Ls { path } => c
            .list_dir(pb::ListDirRequest {
                session_id: need_session()?,
                path,
            })
            .await
            .map(|r| print::dir(con, &r.into_inner())),
        Verb::Find {
            pattern,
            path,
            limit,
        } => c
            .find_files(pb::FindFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                limit,
            })
            .await
            .map(|r| print::found(con, &r.into_inner())),
        Verb::Report {
            planned,
            verify,
            journal,
        } => c
            .get_session_report(pb::GetSessionReportRequest {
                session_id: need_session()?,
                planned_files: planned,
                verification_command: verify.unwrap_or_default(),
            })
            .await
            .map(|r| print::report(con, &r.into_inner(), journal)),
        Verb::Grep {
            pattern,
            path,
            glob,
            ignore_case,
            limit,
        } => c
            .search_files(pb::SearchFilesRequest {
                session_id: need_session()?,
                pattern,
                path,
                glob,
                case_insensitive: ignore_case,
                limit,
            })
            .await
            .map(|r| print::matches(con, &r.into_inner())),
        Verb::Approvals(args) => return crate::cli::approvals::approvals(&mut c, args, con).await,
        Verb::Approve(args) => {
            crate::cli::approvals::decide(&mut c, args, pb::Verdict::Approve, con).await?
        }
        Verb::Reject(args) => {
            crate::cli::approvals::decide(&mut c, args, pb::Verdict::Reject, con).await?
        }
    };
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(status) => {
            // The channel reconnected to a service it does not trust: that,
            // not the transport's words for it, is what happened.
            match service.trust.refusal() {
                Some(refused) => return Err(refused.into()),
                None => print::refusal(con, &status),
            }
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}

/// What `session create` prints of the new session.
#[derive(Debug, Clone, Copy)]
enum Created {
    /// Its id alone (`--quiet`).
    Id,
    /// Shell lines for `eval` (`--export`).
    Export,
    /// Everything, for a person.
    Described,
}

/// Creates a session and prints it as `shown` says. An id or token that
/// is not of the service's own form is refused for `--quiet` and
/// `--export` (see `export`), and nothing is printed on stdout.
async fn create_session(
    c: &mut Client,
    req: pb::CreateSessionRequest,
    shown: Created,
    con: &mut Console<impl Write, impl Write>,
) -> Result<Result<(), tonic::Status>, AnyError> {
    let s = match c.create_session(req).await {
        Ok(r) => r.into_inner(),
        Err(status) => return Ok(Err(status)),
    };
    match shown {
        Created::Id => con.out(format_args!("{}\n", export::checked_id(&s.session_id)?)),
        Created::Export => con.out(format_args!("{}", export::lines(&s)?)),
        Created::Described => print::session(con, &s),
    }
    Ok(Ok(()))
}

/// Streams a command's output live and returns the exit code to exit with.
/// A terminal is shown the output's control characters rather than sent
/// them, unless `raw`; a pipe or file gets it exactly either way.
async fn run_streaming(
    c: &mut Client,
    req: pb::RunCommandRequest,
    raw: bool,
    con: &mut Console<impl Write, impl Write>,
) -> Result<ExitCode, tonic::Status> {
    use pb::run_command_event::Event;
    let mut events = c.run_command(req).await?.into_inner();
    while let Some(ev) = events.message().await? {
        match ev.event {
            Some(Event::Stdout(chunk)) => {
                if raw {
                    con.out_exact(&chunk.data);
                } else {
                    con.out(format_args!("{}", chunk.data));
                }
                con.flush();
            }
            Some(Event::Stderr(chunk)) if raw => con.err_exact(&chunk.data),
            Some(Event::Stderr(chunk)) => con.err(format_args!("{}", chunk.data)),
            Some(Event::Exit(exit)) => {
                print::exit(con, &exit);
                let code = if exit.timed_out {
                    EXIT_TIMED_OUT
                } else if exit.exit_code < 0 {
                    EXIT_UNKNOWN
                } else {
                    exit.exit_code.min(255) as u8
                };
                return Ok(ExitCode::from(code));
            }
            Some(Event::Rejected(rejected)) => {
                print::rejection(con, &rejected);
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
            Some(Event::Started(_)) | None => {}
        }
    }
    Err(tonic::Status::unavailable(
        "the stream ended without an exit event",
    ))
}

#[cfg(test)]
mod tests;
