//! The command line's surface, through the real binary: every option and argument of every
//! subcommand has help text; the man pages sit where `man` looks (`DIR/man1`) and carry EXIT
//! STATUS (the codes docs/protocol.md lists) and ENVIRONMENT; no command panics when the reader
//! of its output goes away, and the daemon survives a closed standard error.
use crate::common;

use common::{BIN, Daemon, open_tempdir};
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn help_of(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .output()
        .expect("run verbd --help");
    assert_eq!(out.status.code(), Some(0), "{path:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of `section` (`Options:`, `Arguments:`, `Commands:`) of a clap help text.
fn section<'a>(help: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines = help.lines().skip_while(|l| *l != name);
    lines.next();
    lines
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

fn subcommands(help: &str) -> Vec<String> {
    section(help, "Commands:")
        .iter()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Options and arguments whose help is empty. clap prints an entry's help after it on the same
/// line, or (when one entry has long help) on the lines below it, indented further; lines that
/// only list defaults or possible values are not help.
fn undocumented(help: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for name in ["Options:", "Arguments:"] {
        let lines = section(help, name);
        let indent = |l: &str| l.len() - l.trim_start().len();
        let is_entry = |l: &str| {
            let t = l.trim_start();
            indent(l) <= 6 && (t.starts_with('-') || t.starts_with('<') || t.starts_with('['))
        };
        for (i, line) in lines.iter().enumerate() {
            if !is_entry(line) {
                continue;
            }
            let trimmed = line.trim();
            let same_line = trimmed
                .split_once("  ")
                .map(|(_, rest)| rest.trim())
                .filter(|rest| !rest.is_empty() && !rest.starts_with('['));
            let below = lines[i + 1..]
                .iter()
                .take_while(|l| !is_entry(l))
                .map(|l| l.trim())
                .find(|l| {
                    !l.is_empty()
                        && !l.starts_with("[default")
                        && !l.starts_with("[possible")
                        && !l.starts_with("Possible values")
                        && !l.starts_with("- ")
                });
            if same_line.is_none() && below.is_none() {
                missing.push(trimmed.split("  ").next().unwrap().to_string());
            }
        }
    }
    missing
}

#[test]
fn every_option_and_argument_of_every_subcommand_has_help_text() {
    let mut pending = vec![Vec::<String>::new()];
    let mut missing = Vec::new();
    let mut seen = 0;
    while let Some(path) = pending.pop() {
        let help = help_of(&path);
        seen += 1;
        for entry in undocumented(&help) {
            missing.push(format!("verbd {} {entry}", path.join(" ")));
        }
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    assert!(seen > 30, "only {seen} help texts were read");
    assert!(
        missing.is_empty(),
        "without help text:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_help_checker_sees_an_option_without_help() {
    let same_line = "Usage: x\n\nOptions:\n      --policy <POLICY>        \n  -h, --help               Print help\n";
    assert_eq!(undocumented(same_line), vec!["--policy <POLICY>"]);
    let next_line = "Options:\n      --state-dir <STATE_DIR>\n          \n      --file <FILE>\n          Check a file\n  -h, --help\n          Print help\n";
    assert_eq!(undocumented(next_line), vec!["--state-dir <STATE_DIR>"]);
}

/// The exit codes of docs/protocol.md's "CLI exit codes" table and of the paragraph on `verbd
/// serve` below it.
fn documented_exit_codes() -> (BTreeSet<String>, BTreeSet<String>) {
    let doc = std::fs::read_to_string("docs/protocol.md").unwrap();
    let table: String = doc
        .split("## CLI exit codes")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap()
        .to_string();
    let mut client = BTreeSet::new();
    let mut serve = BTreeSet::new();
    for line in table.lines() {
        if let Some(row) = line.strip_prefix("| ") {
            let code = row.split(" |").next().unwrap().trim();
            if code.chars().all(|c| c.is_ascii_digit()) {
                client.insert(code.to_string());
            }
            // The first row's detail: `128+N` and `124`.
            for word in row.split(['`', ' ', ',', '(', ')']) {
                if word == "128+N" || word == "124" {
                    client.insert(word.to_string());
                }
            }
        }
        if line.starts_with("`verbd serve` has its own codes:") || line.contains("operating-system")
        {
            for word in line.split([' ', ';', ':', ',']) {
                if !word.is_empty() && word.chars().all(|c| c.is_ascii_digit()) {
                    serve.insert(word.to_string());
                }
            }
        }
    }
    (client, serve)
}

/// The codes a man page's EXIT STATUS section lists (`.TP` then `\fBCODE\fR`), in two groups
/// when it has the `verbd serve:` paragraph.
fn man_exit_codes(page: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let body = page
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .expect("an EXIT STATUS section")
        .split("\n.SH ")
        .next()
        .unwrap();
    let (first, second) = match body.split_once("verbd serve:") {
        Some((a, b)) => (a, Some(b)),
        None => (body, None),
    };
    let codes = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("\\fB")?.strip_suffix("\\fR"))
            .filter(|c| c.starts_with(|ch: char| ch.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    };
    (codes(first), second.map(codes).unwrap_or_default())
}

#[test]
fn man_pages_are_in_man1_with_exit_status_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("man")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let man1 = dir.path().join("man1");
    assert!(man1.join("verbd.1").is_file());
    assert!(man1.join("verbd-serve.1").is_file());
    assert!(
        !dir.path().join("verbd.1").exists(),
        "pages must not be written flat into DIR"
    );
    let pages: Vec<_> = std::fs::read_dir(&man1).unwrap().flatten().collect();
    assert!(pages.len() > 30, "{} pages", pages.len());
    for page in &pages {
        let text = std::fs::read_to_string(page.path()).unwrap();
        let name = page.file_name().to_string_lossy().into_owned();
        assert!(
            text.contains(".SH \"EXIT STATUS\""),
            "{name}: no EXIT STATUS"
        );
        assert!(text.contains(".SH ENVIRONMENT"), "{name}: no ENVIRONMENT");
        for variable in ["VERBD_SOCKET", "VERBD_LOG", "NO_COLOR"] {
            assert!(
                text.contains(variable),
                "{name}: ENVIRONMENT lacks {variable}"
            );
        }
    }
    let (client, serve) = documented_exit_codes();
    assert!(client.contains("65") && client.contains("77") && client.contains("128+N"));
    assert_eq!(
        serve,
        ["0", "71", "75", "78"].map(String::from).into(),
        "protocol.md's serve codes"
    );
    let top = std::fs::read_to_string(man1.join("verbd.1")).unwrap();
    assert_eq!(man_exit_codes(&top), (client.clone(), serve.clone()));
    let serve_page = std::fs::read_to_string(man1.join("verbd-serve.1")).unwrap();
    assert_eq!(man_exit_codes(&serve_page).0, serve);
    let call_page = std::fs::read_to_string(man1.join("verbd-call.1")).unwrap();
    assert_eq!(man_exit_codes(&call_page).0, client);

    // `man` itself finds and renders them by MANPATH, without a warning from groff.
    if Command::new("man").arg("--version").output().is_err() {
        common::skip::skip_or_fail(
            "man_pages_are_in_man1_with_exit_status_and_environment",
            "needs man (man-db)",
        );
        return;
    }
    let found = Command::new("man")
        .args(["-w", "verbd-serve"])
        .env("MANPATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        man1.join("verbd-serve.1").to_str().unwrap(),
        "{found:?}"
    );
    for page in ["verbd.1", "verbd-serve.1", "verbd-audit-tail.1"] {
        let rendered = Command::new("man")
            .args(["--warnings", "-E", "UTF-8", "-l"])
            .arg(man1.join(page))
            .env("MANWIDTH", "80")
            .env("MANROFFSEQ", "")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        assert!(rendered.status.success(), "{page}: {rendered:?}");
        assert!(
            rendered.stderr.is_empty(),
            "{page}: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(text.contains("EXIT STATUS") && text.contains("ENVIRONMENT"));
    }
}

/// Runs verbd with its standard output a pipe whose reader is already gone; returns how it
/// ended and what it wrote to standard error.
fn with_closed_stdout(args: &[&str], env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_command_panics_when_the_reader_of_its_output_is_gone() {
    let dir = open_tempdir();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "version = 1\n[daemon]\nallow_root = true\n[roles.me]\nuids = [0]\n[verb.echo]\ndescription = \"echo\"\ncategory = \"read-only\"\nroles = [\"me\"]\ncommand = \"/bin/echo {text}\"\nparams.text = { type = \"string\", pattern = \"[a-z]+\" }\nexamples.accept = [{ text = \"hi\" }]\n",
    )
    .unwrap();
    let daemon = Daemon::start(&std::fs::read_to_string(&policy).unwrap());
    let p = policy.to_str().unwrap();
    let socket = daemon.socket.to_str().unwrap();
    let state = daemon.state.to_str().unwrap();
    let man_dir = dir.path().join("man");
    let cases: Vec<Vec<&str>> = vec![
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["man", man_dir.to_str().unwrap()],
        vec!["--help"],
        vec!["policy", "--help"],
        vec!["policy", "check", p],
        vec!["policy", "explain", p, "echo", "text=hi"],
        vec!["policy", "explain", "--json", p, "echo", "text=hi"],
        vec!["policy", "schema"],
        vec!["selftest", "--policy", p],
        vec!["selftest", "--policy", p, "--json"],
        vec!["sandbox", "why", "--policy", p, "default", "/usr/bin"],
        vec!["list", "--socket", socket],
        vec!["list", "--json", "--socket", socket],
        vec!["call", "--socket", socket, "echo", "text=hi"],
        vec!["call", "--json", "--socket", socket, "echo", "text=hi"],
        vec!["status", "--socket", socket],
        vec!["status", "--prometheus", "--socket", socket],
        vec!["audit", "tail", "--state-dir", state],
        vec!["audit", "tail", "--json", "--state-dir", state],
        vec!["audit", "verify", "--state-dir", state],
        vec!["mcp", "--print-config", "claude"],
        vec!["hook", "claude-code", "--print-settings"],
    ];
    for args in &cases {
        let (status, stderr) = with_closed_stdout(args, &[]);
        assert!(
            !stderr.contains("panicked") && status.code() != Some(101),
            "verbd {args:?} with its output closed: {status:?}\n{stderr}"
        );
        // A filter ends by SIGPIPE, as `cat` does; the others end by their own status.
        assert!(
            status.signal().is_none_or(|s| s == libc::SIGPIPE),
            "verbd {args:?}: {status:?}"
        );
    }
}

#[test]
fn the_daemon_keeps_serving_when_its_stderr_reader_is_gone() {
    let dir = open_tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[daemon]\nallow_root = true\n[roles.me]\nuids = [0]\n[verb.echo]\ndescription = \"echo\"\ncategory = \"read-only\"\nroles = [\"me\"]\ncommand = \"/bin/echo hi\"\n",
    )
    .unwrap();
    let socket = dir.path().join("verbd.sock");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("VERBD_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the daemon ended with a closed stderr: {status:?}");
        }
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..3 {
        let out = Command::new(BIN)
            .args(["call", "--socket", socket.to_str().unwrap(), "echo"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n", "{out:?}");
    }
    assert!(child.try_wait().unwrap().is_none(), "the daemon died");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

const QUIET_POLICY: &str = "version = 1\n[daemon]\nuser = \"nobody\"\n[roles.me]\nuids = [0]\n[verb.echo]\ndescription = \"echo\"\ncategory = \"read-only\"\nroles = [\"me\"]\ncommand = \"/bin/echo hi\"\n";

/// Starts `serve` on [`QUIET_POLICY`] with `stderr`, waits until it serves, stops it; returns
/// how it ended.
fn serve_once(
    stderr: impl Into<Stdio>,
    env: &[(&str, &str)],
    mut pump: impl FnMut(),
) -> std::process::ExitStatus {
    let dir = open_tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, QUIET_POLICY).unwrap();
    let socket = dir.path().join("verbd.sock");
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        pump();
        assert!(child.try_wait().unwrap().is_none(), "the daemon ended");
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    pump();
    status
}

/// Everything a daemon wrote to a pseudo-terminal as its standard error.
fn serve_on_a_terminal(env: &[(&str, &str)]) -> String {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).unwrap();
    nix::fcntl::fcntl(
        &pty.master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut seen = Vec::new();
    let status = serve_once(std::fs::File::from(pty.slave), env, || {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = master.read(&mut buffer) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buffer[..n]);
        }
    });
    assert_eq!(status.code(), Some(0));
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn start_up_logs_no_canary_warnings_and_colour_only_on_a_terminal_without_no_color() {
    // Into a file at the default level: the canary's refused connects (what the self-test wants)
    // are not warnings, and nothing is coloured.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let status = serve_once(std::fs::File::create(&log).unwrap(), &[], || {});
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("self-test passed"), "{text}");
    assert!(!text.contains("WARN"), "{text}");
    assert!(!text.contains("refused"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour escapes in a file: {text:?}"
    );
    // At debug level they are there, still without colour in a file.
    let status = serve_once(
        std::fs::File::create(&log).unwrap(),
        &[("VERBD_LOG", "debug")],
        || {},
    );
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("DEBUG") && text.contains("connect refused, as expected"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "colour escapes in a file: {text:?}"
    );
    // On a terminal: coloured, unless NO_COLOR says otherwise.
    let coloured = serve_on_a_terminal(&[("VERBD_LOG", "debug")]);
    assert!(
        coloured.contains("as expected") && coloured.contains('\u{1b}'),
        "{coloured:?}"
    );
    let plain = serve_on_a_terminal(&[("VERBD_LOG", "debug"), ("NO_COLOR", "1")]);
    assert!(
        plain.contains("as expected") && !plain.contains('\u{1b}'),
        "{plain:?}"
    );
}
