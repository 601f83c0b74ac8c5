//! The programs a verb may not run without `allow_interpreter`: shells, interpreters and exec
//! wrappers, each of which would turn a verb back into a general-purpose shell. A program counts
//! when its name, its name without a version suffix (`python3.12`), or the name it resolves to
//! through symlinks is on the list.
#![forbid(unsafe_code)]

use std::path::Path;

/// Programs that would turn a verb back into a general-purpose shell.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "pdksh",
    "csh",
    "tcsh",
    "fish",
    "ash",
    "rbash",
    "busybox",
    "toybox",
    "env",
    "python",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "expect",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "xargs",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "setsid",
    "sudo",
    "su",
    "doas",
    "pkexec",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "script",
    "gdb",
    "osascript",
    "pwsh",
    "powershell",
    "R",
    "Rscript",
    "julia",
    "ssh",
    "socat",
    "ncat",
    "nc",
    "vim",
    "vi",
    "nvim",
    "ed",
    "ex",
    "emacs",
];

/// The interpreter or shell name when `program` (or what it resolves to on this host) is one:
/// for a policy's own programs, which the operator wrote.
pub fn is_interpreter(program: &Path) -> Option<String> {
    interpreter_name(program).or_else(|| {
        std::fs::canonicalize(program)
            .ok()
            .and_then(|p| interpreter_name(&p))
    })
}

/// The interpreter or shell name when `program`'s own last component names one, without
/// touching the filesystem: for a command an agent wrote, where resolving the path as the
/// daemon would answer what a path the agent cannot see resolves to.
pub fn interpreter_name(program: &Path) -> Option<String> {
    let name = program.file_name()?.to_str()?;
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .any(|i| *i == name || *i == stem)
        .then(|| name.to_string())
}
