//! Shell completions and man pages generated from the command line definition itself, so they
//! never drift from it: `verbd completions bash|zsh|fish` prints a completion script and
//! `verbd man DIR` writes `DIR/man1/verbd.1` and one page per subcommand
//! (`DIR/man1/verbd-policy-coverage.1`…), the layout `man` searches, so `MANPATH=DIR man
//! verbd-serve` finds them. Hidden (internal) subcommands get no page.
//!
//! Every page also has an EXIT STATUS section (`verbd serve`'s codes on its page, the client and
//! tool codes on the others, both on `verbd.1`) and an ENVIRONMENT section. The exit codes and
//! their tables are [`verbd::exit`]'s.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use verbd::exit::{CLIENT_EXIT_STATUS, SERVE_EXIT_STATUS};

/// The environment variables verbd reads, and who reads them.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "VERBD_SOCKET",
        "the socket the client commands (call, list, pending, approve, mcp, hook, ...) connect to when --socket is not given; without either, the socket serve binds by default for this user if it is there, else the packaged daemon's /run/verbd/verbd.sock (agents' commands) or /run/verbd/approve.sock (approvers')",
    ),
    (
        "VERBD_LOG",
        "what serve and mcp log, as a tracing filter: error, warn, info (serve's default), debug (also the self-test canary's expected refusals), or per module such as verbd::server=debug",
    ),
    (
        "NO_COLOR",
        "set to anything but the empty string: no colour in log lines even on a terminal (log lines are never coloured when standard error is not a terminal)",
    ),
    (
        "XDG_RUNTIME_DIR",
        "serve's default agent socket is $XDG_RUNTIME_DIR/verbd.sock (without it: verbd.sock in the state directory)",
    ),
    (
        "XDG_STATE_HOME, HOME",
        "the default state directory of a daemon that is not root: $XDG_STATE_HOME/verbd, else ~/.local/state/verbd (root: /var/lib/verbd)",
    ),
    (
        "CREDENTIALS_DIRECTORY",
        "systemd credentials (LoadCredential=): secrets with credential = NAME, the journal's sealing key",
    ),
    (
        "NOTIFY_SOCKET",
        "serve tells systemd READY=1 (after the self-test), STATUS=, RELOADING=1 and STOPPING=1 there",
    ),
    (
        "LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES",
        "sockets passed by systemd (socket activation): serve serves them instead of binding its own",
    ),
    (
        "VERBD_JOURNALD_SOCKET",
        "journald's native socket for the journal's entries (default /run/systemd/journal/socket)",
    ),
    (
        "VERBD_EXEC_LANDLOCK_ONLY",
        "set: verbd exec keeps protected entries with the Landlock-only split too (as --landlock-only)",
    ),
    (
        "VERBD_EXEC_MOUNT_NAMESPACE",
        "set: verbd exec adds a user and mount namespace with read-only binds over existing protected entries (as --mount-namespace)",
    ),
];

/// Print the completion script of `shell` for `command`. The script is built in memory first:
/// a reader that goes away makes this return an error instead of a panic inside the generator.
pub fn completions(
    mut command: clap::Command,
    shell: clap_complete::Shell,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    out.write_all(&script)?;
    out.flush()
}

/// Write the man pages of `command` and all its visible subcommands into `dir/man1`.
pub fn man_pages(command: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let section = dir.join("man1");
    std::fs::create_dir_all(&section)?;
    let mut written = Vec::new();
    let mut command = command;
    command.build();
    write_page(&command, command.get_name(), &section, &mut written)?;
    Ok(written)
}

fn write_page(
    command: &clap::Command,
    page: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    clap_mangen::Man::new(command.clone())
        .title(page.to_string())
        .render(&mut buffer)?;
    let rendered = String::from_utf8(buffer).map_err(std::io::Error::other)?;
    let path = dir.join(format!("{page}.1"));
    std::fs::write(&path, with_sections(rendered, &extra_sections(page)))?;
    written.push(path);
    for sub in command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("{page}-{}", sub.get_name());
        write_page(sub, &name, dir, written)?;
    }
    Ok(())
}

/// EXIT STATUS and ENVIRONMENT of `page`, as roff.
fn extra_sections(page: &str) -> String {
    let mut roff = String::from(".SH \"EXIT STATUS\"\n");
    let serve = page == "verbd-serve" || page.starts_with("verbd-serve-");
    if page == "verbd" {
        roff.push_str(&paragraph("The client commands and the offline tools:"));
    }
    if !serve {
        for status in CLIENT_EXIT_STATUS {
            roff.push_str(&entry(&status.label(), status.meaning));
        }
    }
    if page == "verbd" {
        roff.push_str(&paragraph("verbd serve:"));
    }
    if serve || page == "verbd" {
        for status in SERVE_EXIT_STATUS {
            roff.push_str(&entry(&status.label(), status.meaning));
        }
    }
    roff.push_str(".SH ENVIRONMENT\n");
    for (name, meaning) in ENVIRONMENT {
        roff.push_str(&entry(name, meaning));
    }
    roff
}

/// The page with `sections` before its VERSION section (only `verbd.1` has one), else at its end.
fn with_sections(page: String, sections: &str) -> String {
    match page.find("\n.SH VERSION") {
        Some(at) => format!("{}\n{}{}", &page[..at], sections, &page[at + 1..]),
        None if page.ends_with('\n') => page + sections,
        None => format!("{page}\n{sections}"),
    }
}

fn entry(term: &str, text: &str) -> String {
    format!(".TP\n\\fB{}\\fR\n{}\n", escape(term), escape(text))
}

fn paragraph(text: &str) -> String {
    format!(".PP\n{}\n", escape(text))
}

/// Text safe on a roff text line: backslashes and dashes escaped, apostrophes as the `Aq` string
/// clap_mangen's preamble defines, and no line starting with a control character.
fn escape(text: &str) -> String {
    let escaped = text
        .replace('\\', "\\e")
        .replace('-', "\\-")
        .replace('\'', "\\*(Aq");
    if escaped.starts_with('.') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}
