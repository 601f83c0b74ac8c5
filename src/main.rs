//! The `verbd` command line: dispatch only (the types are `cli::args`). Each arm of [`run`] is one call into
//! `verbd::serve` (the daemon) or a `cli` module (the clients and offline tools), which hold the
//! work, the printing and the exit codes (see `cli` for the codes and how to add a subcommand).
#![forbid(unsafe_code)]

mod cli;

use clap::Parser;
use std::process::ExitCode;
use verbd::paths::ClientSide;
use verbd::protocol::{Request, State};

use cli::args::{Cli, Command, Tools};
fn main() -> ExitCode {
    // The daemon's spawner process (started by `verbd serve` only): before anything else.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(verbd::spawner::SPAWNER_ARG))
    {
        // What the loader and the runtime's start touched goes back to the kernel; the pages an
        // order uses come back on their own (a failure only leaves them resident).
        let _ = verbd::sys::memory::release_clean_pages();
        return ExitCode::from(verbd::spawner::serve_process());
    }
    // What an agent runtime runs on every tool call skips clap (the same values, or clap's).
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let command = cli::fast_path::parse(&args).unwrap_or_else(|| Cli::parse().command);
    if command.ends_with_its_reader()
        && let Err(e) = verbd::sigpipe::die_on_closed_pipe()
    {
        eprintln!("verbd: cannot restore the default SIGPIPE disposition: {e}");
        return ExitCode::from(cli::EXIT_ERROR);
    }
    match run(command) {
        Ok(code) => code,
        Err(e) => {
            verbd::eprintln_lossy!("verbd: {}", cli::describe(&e));
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    use cli::client;
    match command {
        Command::Serve {
            policy,
            socket,
            state_dir,
        } => Ok(ExitCode::from(verbd::serve::main(
            verbd::serve::ServeOptions {
                policy,
                socket,
                state_dir,
            },
        ))),
        Command::Call {
            socket,
            json,
            reason,
            idempotency_key,
            break_glass,
            max_lines,
            max_duration,
            verb,
            args,
        } => client::call(
            &socket.path(ClientSide::Agent),
            verb,
            &args,
            reason,
            if break_glass {
                client::CallMode::BreakGlass
            } else {
                client::CallMode::Call {
                    idempotency_key,
                    stream: verbd::protocol::StreamAsk {
                        max_duration_ms: max_duration,
                        max_lines,
                    },
                }
            },
            json,
        ),
        Command::List { socket, json } => client::list(&socket.path(ClientSide::Agent), json),
        Command::Pending { socket, json } => client::pending(
            &socket.path(ClientSide::Approver),
            socket.for_next_command(),
            json,
        ),
        Command::Approve {
            socket,
            id,
            hash,
            json,
        } => client::send(
            &socket.path(ClientSide::Approver),
            &Request::Approve { id, hash },
            // An approval short of a quorum is recorded and leaves the proposal pending.
            Some(State::Pending),
            json,
        ),
        Command::Deny { socket, id, reason } => client::send(
            &socket.path(ClientSide::Approver),
            &Request::Deny { id, reason },
            Some(State::Denied),
            false,
        ),
        Command::Wait {
            socket,
            id,
            timeout,
            json,
        } => {
            let timeout_ms = timeout.min(600) * 1000;
            client::proposal(
                &socket.path(ClientSide::Agent),
                socket.for_next_command(),
                &Request::Wait { id, timeout_ms },
                json,
            )
        }
        Command::Result { socket, id, json } => client::proposal(
            &socket.path(ClientSide::Agent),
            socket.for_next_command(),
            &Request::Result { id },
            json,
        ),
        Command::Resolve {
            socket,
            id,
            outcome,
            note,
        } => client::send(
            &socket.path(ClientSide::Approver),
            &Request::Resolve { id, outcome, note },
            Some(State::Resolved),
            false,
        ),
        Command::Status {
            socket,
            json,
            prometheus,
            output,
        } => {
            let format = match (json, prometheus) {
                (true, _) => cli::status::Format::Json,
                (_, true) => cli::status::Format::Prometheus,
                _ => cli::status::Format::Text,
            };
            cli::status::run(&socket.path(ClientSide::Agent), format, output.as_deref())
        }
        Command::Reload { socket } => client::send(
            &socket.path(ClientSide::Approver),
            &Request::Reload {},
            None,
            false,
        ),
        Command::Exec {
            policy,
            profile,
            print_status,
            landlock_only,
            mount_namespace,
            program,
            args,
        } => cli::local::exec(
            policy,
            &profile,
            print_status,
            landlock_only,
            mount_namespace,
            &program,
            &args,
        ),
        Command::Selftest {
            policy,
            state_dir,
            json,
        } => cli::local::selftest(policy, state_dir, json),
        Command::Canary {
            outside,
            network_none,
            fast_open_refused,
            keeps_capabilities,
            bounding_kept,
            private,
        } => Ok(cli::local::canary(&verbd::selftest::CanaryPlan {
            outside,
            network_none,
            fast_open_refused,
            keeps_capabilities,
            bounding_kept,
            private,
        })),
        Command::Tools(Tools::Sandbox { command }) => cli::local::sandbox(command),
        Command::Tools(Tools::Audit { command }) => cli::audit::run(command),
        Command::Tools(Tools::Hook { command }) => cli::local::hook(command),
        Command::Tools(Tools::Sh { socket, command }) => {
            cli::sh::run(&socket.path(ClientSide::Agent), &command)
        }
        Command::Tools(Tools::Mcp {
            socket,
            print_config,
        }) => cli::mcp::run(
            &socket.path(ClientSide::Agent),
            socket.socket.as_deref(),
            print_config,
        ),
        Command::Tools(Tools::Policy { command }) => cli::policy_tools::run(command),
        Command::Tools(Tools::Notify { command }) => cli::notify::run(command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            cli::docs::completions(Cli::command(), shell, &mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => {
            use clap::CommandFactory;
            for page in cli::docs::man_pages(Cli::command(), &dir)? {
                println!("{}", page.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
