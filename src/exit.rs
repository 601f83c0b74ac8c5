//! Every exit code verbd exits with, once: a named constant with its meaning, and the tables the
//! man pages' EXIT STATUS sections print (the binary's `cli::docs`). The command line, `serve`, `audit`,
//! the offline policy tools, the hooks and `verbd mcp` exit with these constants and no literal
//! number; a unit test holds the tables to docs/protocol.md ("CLI exit codes"), so the document
//! cannot drift from the code. (The sandbox's and the spawner's own children are no command: a
//! confined program's status is passed on as it is, shell-style.)
//!
//! Invariant: a code's number never changes (scripts, systemd's `RestartPreventExitStatus=78`
//! and agent runtimes depend on them). Where one number has two meanings (75), it does so for two
//! different commands: busy for a client command, a temporary failure for `serve`.
#![forbid(unsafe_code)]

/// Success.
pub const EXIT_SUCCESS: u8 = 0;
/// A failed check: `policy check`, `policy test`, `policy coverage`, `audit verify`, `selftest`.
pub const EXIT_CHECK_FAILED: u8 = 1;
/// A usage error, as clap reports it (an unknown option, a missing argument, a value out of range).
pub const EXIT_USAGE: u8 = 2;
/// A hook's deny: the agent runtime blocks the tool call (its answer on stdout, the reason on
/// stderr); also a hook past its deadline. Only `verbd hook …` exits so; clap's usage errors are
/// the other 2.
pub const EXIT_HOOK_DENIED: u8 = 2;
/// Invalid arguments (including `REQUIRES_CLARIFICATION`), or unusable input to a policy tool.
pub const EXIT_INVALID: u8 = 65;
/// The daemon cannot be reached.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// A daemon error (or a client-side error).
pub const EXIT_ERROR: u8 = 70;
/// `serve`: an operating-system failure (`EX_OSERR`).
pub const EXIT_OSERR: u8 = 71;
/// Confirmation required: a proposal was created (or already exists).
pub const EXIT_CONFIRM: u8 = 73;
/// Busy; or, for `wait`, still undecided at the timeout.
pub const EXIT_BUSY: u8 = 75;
/// `serve`: the journal cannot be written at start; a restart may succeed (`EX_TEMPFAIL`).
pub const EXIT_TEMPFAIL: u8 = 75;
/// Denied.
pub const EXIT_DENIED: u8 = 77;
/// `serve`: a configuration error; systemd does not restart (`RestartPreventExitStatus=78`).
pub const EXIT_CONFIG: u8 = 78;
/// The verb timed out.
pub const EXIT_TIMED_OUT: u8 = 124;
/// `exec`: the program could not be started.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// `exec`: the program was not found.
pub const EXIT_NOT_FOUND: u8 = 127;
/// A run killed by signal N exits `EXIT_SIGNAL_BASE + N`, as shells report it.
pub const EXIT_SIGNAL_BASE: i32 = 128;

/// The code column of an exit-status table.
pub enum Code {
    /// One fixed number.
    Fixed(u8),
    /// The exit code of the verb that ran.
    VerbOwn,
    /// `EXIT_SIGNAL_BASE` plus the number of the signal that killed the verb.
    Signal,
}

/// One exit status as the man pages list it.
pub struct ExitStatus {
    pub code: Code,
    pub meaning: &'static str,
}

impl ExitStatus {
    /// The code as the man pages show it: `70`, `the verb's own`, `128+N`.
    pub fn label(&self) -> String {
        match self.code {
            Code::Fixed(code) => code.to_string(),
            Code::VerbOwn => "the verb's own".to_string(),
            Code::Signal => format!("{EXIT_SIGNAL_BASE}+N"),
        }
    }
}

/// The client commands' and offline tools' exit statuses (docs/protocol.md, "CLI exit codes").
pub const CLIENT_EXIT_STATUS: &[ExitStatus] = &[
    ExitStatus {
        code: Code::Fixed(EXIT_SUCCESS),
        meaning: "success; also: approve answered queued (approved, the run waits for a slot)",
    },
    ExitStatus {
        code: Code::VerbOwn,
        meaning: "call, wait, result: the verb ran and exited with this code",
    },
    ExitStatus {
        code: Code::Signal,
        meaning: "the verb was killed by signal N",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_TIMED_OUT),
        meaning: "the verb timed out",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_CHECK_FAILED),
        meaning: "a failed check (policy check, audit verify, selftest)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_USAGE),
        meaning: "usage error (an unknown option, a missing argument, a value out of range)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_INVALID),
        meaning: "invalid arguments (including REQUIRES_CLARIFICATION)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_UNAVAILABLE),
        meaning: "the daemon is unreachable",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_ERROR),
        meaning: "daemon error",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_CONFIRM),
        meaning: "confirmation required: a proposal was created (or already exists)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_BUSY),
        meaning: "busy; or, for wait, still undecided at the timeout",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_DENIED),
        meaning: "denied",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_CANNOT_EXECUTE),
        meaning: "exec: the program could not be started",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_NOT_FOUND),
        meaning: "exec: the program was not found",
    },
];

/// `verbd serve`'s exit statuses (`crate::serve`).
pub const SERVE_EXIT_STATUS: &[ExitStatus] = &[
    ExitStatus {
        code: Code::Fixed(EXIT_SUCCESS),
        meaning: "a clean stop (SIGTERM or SIGINT)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_CONFIG),
        meaning: "a configuration error: the policy, the daemon user, the state directory, a journal that does not verify, the self-test (systemd does not restart: RestartPreventExitStatus=78)",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_OSERR),
        meaning: "an operating-system failure",
    },
    ExitStatus {
        code: Code::Fixed(EXIT_TEMPFAIL),
        meaning: "the journal cannot be written at start (a restart may help once there is space)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// docs/protocol.md's "CLI exit codes" section.
    fn documented() -> String {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md"))
            .unwrap();
        doc.split("## CLI exit codes")
            .nth(1)
            .expect("docs/protocol.md has a CLI exit codes section")
            .split("\n## ")
            .next()
            .unwrap()
            .to_string()
    }

    fn numbers(table: &[ExitStatus]) -> BTreeSet<String> {
        table
            .iter()
            .filter(|s| matches!(s.code, Code::Fixed(_)))
            .map(ExitStatus::label)
            .collect()
    }

    #[test]
    fn the_client_table_is_the_documented_one() {
        let section = documented();
        let mut rows = BTreeSet::new();
        for line in section.lines() {
            if let Some(row) = line.strip_prefix("| ") {
                let code = row.split(" |").next().unwrap().trim();
                if !code.is_empty() && code.chars().all(|c| c.is_ascii_digit()) {
                    rows.insert(code.to_string());
                }
            }
        }
        // 0 and the timeout's 124 are told in the text of the table, not in rows of their own.
        for told in [EXIT_SUCCESS, EXIT_TIMED_OUT] {
            assert!(
                section.contains(&format!("`{told}`")),
                "{told} is not documented"
            );
            rows.insert(told.to_string());
        }
        assert!(section.contains(&format!("`{EXIT_SIGNAL_BASE}+N`")));
        assert_eq!(rows, numbers(CLIENT_EXIT_STATUS));
    }

    #[test]
    fn the_serve_table_is_the_documented_one() {
        let section = documented();
        let paragraph = section
            .split("`verbd serve` has its own codes:")
            .nth(1)
            .expect("the paragraph on verbd serve")
            .split("\n\n")
            .next()
            .unwrap();
        let told: BTreeSet<String> = paragraph
            .split([' ', ';', ':', ',', '\n'])
            .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()))
            .map(str::to_string)
            .collect();
        assert_eq!(told, numbers(SERVE_EXIT_STATUS));
    }
}
