//! The command lines an agent runtime runs on every tool call, read without clap: `verbd hook
//! claude-code|gemini-cli|cursor [--socket PATH]` (each Bash call) and the plain `verbd call [--socket
//! PATH] [--] VERB key=value…` a rewritten command runs. Building clap's command tree and
//! matching against it is a large share of these short processes' start (docs/PERFORMANCE.md).
//!
//! Invariant: this only ever recognises command lines clap parses into the very same
//! [`Command`] value, and answers `None` for everything else (any other flag, `--help`, a
//! repeated `--socket`, a value clap would refuse, an empty word, text that is not UTF-8 where
//! clap wants UTF-8), which then goes to clap: help, usage errors and exit codes stay clap's,
//! byte for byte. The tests below hold the two parsers to the same values.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::cli::args::{Command, Tools};
use crate::cli::local::HookCommand;
use crate::cli::socket_arg::SocketArg;

/// `args` (without the program name) as clap would parse it, when it is one of the shapes
/// above; `None` otherwise.
pub(crate) fn parse(args: &[OsString]) -> Option<Command> {
    let (first, rest) = args.split_first()?;
    match first.to_str()? {
        "hook" => hook(rest),
        "call" => call(rest),
        _ => None,
    }
}

/// `hook claude-code|gemini-cli|cursor [--socket PATH]`.
fn hook(args: &[OsString]) -> Option<Command> {
    let (runtime, rest) = args.split_first()?;
    let mut socket = None;
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        take_socket(word, &mut words, &mut socket)?;
    }
    let socket = SocketArg { socket };
    let command = match runtime.to_str()? {
        "claude-code" => HookCommand::ClaudeCode {
            socket,
            print_settings: false,
        },
        "gemini-cli" => HookCommand::GeminiCli {
            socket,
            print_settings: false,
        },
        "cursor" => HookCommand::Cursor {
            socket,
            print_settings: false,
        },
        _ => return None,
    };
    Some(Command::Tools(Tools::Hook { command }))
}

/// `call [--socket PATH] [--] VERB key=value…` (`--socket` anywhere before `--`).
fn call(args: &[OsString]) -> Option<Command> {
    let mut socket = None;
    let mut positional: Vec<String> = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            for word in words.by_ref() {
                positional.push(plain_text(word)?.to_string());
            }
            break;
        }
        if is_option(word) {
            take_socket(word, &mut words, &mut socket)?;
            continue;
        }
        positional.push(plain_text(word)?.to_string());
    }
    let (verb, args) = positional.split_first()?;
    Some(Command::Call {
        socket: SocketArg { socket },
        json: false,
        reason: None,
        idempotency_key: None,
        break_glass: false,
        max_lines: None,
        max_duration: None,
        verb: verb.clone(),
        args: args.to_vec(),
    })
}

/// `word` is `--socket PATH` (PATH the next word) or `--socket=PATH`, the first `--socket`
/// seen: sets `socket`. Anything else is `None` (clap's to read).
fn take_socket<'a>(
    word: &OsStr,
    words: &mut impl Iterator<Item = &'a OsString>,
    socket: &mut Option<PathBuf>,
) -> Option<()> {
    if socket.is_some() {
        return None;
    }
    let path = if word == "--socket" {
        let value = words.next()?;
        if is_option(value) {
            return None;
        }
        value.clone()
    } else {
        OsString::from(word.to_str()?.strip_prefix("--socket=")?)
    };
    if path.is_empty() {
        return None;
    }
    *socket = Some(PathBuf::from(path));
    Some(())
}

/// A word clap reads as an option (or the `-` it treats specially).
fn is_option(word: &OsStr) -> bool {
    word.as_encoded_bytes().first() == Some(&b'-')
}

/// A positional value clap's `String` parser takes as it is: UTF-8, not empty.
fn plain_text(word: &OsStr) -> Option<&str> {
    word.to_str().filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::Parser;

    fn words(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    /// What the tests compare of a parsed command line.
    fn summary(command: &Command) -> String {
        match command {
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
            } => format!(
                "call {:?} {json} {reason:?} {idempotency_key:?} {break_glass} {max_lines:?} {max_duration:?} {verb:?} {args:?}",
                socket.socket
            ),
            Command::Tools(Tools::Hook {
                command:
                    HookCommand::ClaudeCode {
                        socket,
                        print_settings,
                    },
            }) => format!("claude-code {:?} {print_settings}", socket.socket),
            Command::Tools(Tools::Hook {
                command:
                    HookCommand::GeminiCli {
                        socket,
                        print_settings,
                    },
            }) => format!("gemini-cli {:?} {print_settings}", socket.socket),
            Command::Tools(Tools::Hook {
                command:
                    HookCommand::Cursor {
                        socket,
                        print_settings,
                    },
            }) => format!("cursor {:?} {print_settings}", socket.socket),
            _ => "another command".into(),
        }
    }

    #[test]
    fn what_it_reads_clap_reads_the_same() {
        let lines: &[&[&str]] = &[
            &["hook", "claude-code"],
            &["hook", "gemini-cli"],
            &["hook", "claude-code", "--socket", "/run/verbd/verbd.sock"],
            &["hook", "gemini-cli", "--socket=/tmp/v.sock"],
            &["hook", "cursor", "--socket", "/run/verbd/verbd.sock"],
            &["call", "echo"],
            &["call", "echo", "text=x"],
            &["call", "echo", "text=-x", "b=", "c=d=e"],
            &[
                "call",
                "--socket",
                "/tmp/v.sock",
                "--",
                "journal-unit",
                "lines=50",
                "unit=a b",
            ],
            &["call", "echo", "--socket", "/tmp/v.sock", "text=x"],
            &["call", "--socket=/tmp/v.sock", "echo", "notkv"],
            &["call", "--", "--json", "-x", "--socket", "s"],
            &["call", "help"],
        ];
        for line in lines {
            let fast = parse(&words(line)).unwrap_or_else(|| panic!("{line:?} is left to clap"));
            let clap = Cli::try_parse_from(std::iter::once("verbd").chain(line.iter().copied()))
                .unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(summary(&fast), summary(&clap.command), "{line:?}");
        }
    }

    #[test]
    fn everything_else_is_left_to_clap() {
        let lines: &[&[&str]] = &[
            &[],
            &["hook"],
            &["hook", "claude-code", "--print-settings"],
            &["hook", "claude-code", "--help"],
            &["hook", "--socket", "s", "claude-code"],
            &["hook", "codex"],
            &["hook", "claude-code", "--socket"],
            &["hook", "claude-code", "--socket", ""],
            &["hook", "claude-code", "--socket", "-x"],
            &["hook", "claude-code", "--socket", "a", "--socket", "b"],
            &["hook", "claude-code", "extra"],
            &["call"],
            &["call", "--"],
            &["call", "--json", "echo"],
            &["call", "echo", "--reason", "r"],
            &["call", "echo", "-x"],
            &["call", "echo", "-"],
            &["call", "-h"],
            &["call", "echo", "--help"],
            &["call", "", "a=b"],
            &["call", "--socket", "a", "--socket", "b", "echo"],
            &["list"],
            &["--version"],
        ];
        for line in lines {
            assert!(parse(&words(line)).is_none(), "{line:?} read without clap");
        }
        // Not UTF-8 where clap wants a String.
        use std::os::unix::ffi::OsStringExt;
        let verb = OsString::from_vec(vec![b'e', 0xff]);
        assert!(parse(&[OsString::from("call"), verb]).is_none());
    }
}
