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

/// The interpreter or shell name when `program` (or what it resolves to) is one.
pub fn is_interpreter(program: &Path) -> Option<String> {
    let check = |p: &Path| -> Option<String> {
        let name = p.file_name()?.to_str()?;
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        INTERPRETERS
            .iter()
            .any(|i| *i == name || *i == stem)
            .then(|| name.to_string())
    };
    check(program).or_else(|| std::fs::canonicalize(program).ok().and_then(|p| check(&p)))
}
