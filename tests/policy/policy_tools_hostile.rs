//! `verbd policy coverage` and `verbd policy suggest` against transcripts a hostile agent wrote,
//! through the real binary. The agent chooses every byte of its history and every name in its
//! transcript directory; the operator reads what the tools print and pastes what `suggest`
//! drafts. Three attacks:
//!
//! - text that rewrites the operator's screen (ESC sequences, CR, bidi overrides) in the
//!   commands, in file and directory names, and in program names, reaching comments, TOML
//!   strings, the coverage report and stderr;
//! - a transcript directory planted with a link to `/dev/zero`, a FIFO, `x -> .` link loops
//!   and an oversized file, to hang or exhaust the operator's run;
//! - history full of option-level exec (`tar --checkpoint-action=exec=`, `zip -TT`, `git -c`,
//!   `awk system()`, `LESSOPEN`…) that `suggest` would draft as innocent verbs.

use crate::common;

use common::BIN;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use verbd::terminal::is_hidden;

const AGENT: u32 = 63010;

const POLICY: &str = r#"
version = 1
[roles.agent]
uids = [63010]
[roles.sre]
kind = "human"
uids = [0]
[approvals]
approvers = ["sre"]

# An operator's mistake the report must flag: rm with no approval.
[verb.cache-one]
description = "clear one cache directory"
category = "read-only"
roles = ["agent"]
command = "/bin/rm -rf /srv/app/cache/one"
"#;

fn write(dir: &Path, name: impl AsRef<std::ffi::OsStr>, content: &[u8]) -> PathBuf {
    let path = dir.join(name.as_ref());
    std::fs::write(&path, content).unwrap();
    path
}

/// The transcript directory, owned by the agent as its own history would be.
fn agent_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let _ = std::os::unix::fs::chown(dir.path(), Some(AGENT), Some(AGENT));
    dir
}

/// Run the real CLI; kill it after `limit` (returns `None` then).
fn verbd_within(args: &[&std::ffi::OsStr], limit: Duration) -> Option<(Output, Duration)> {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run verbd");
    // Drain both pipes on threads so a large report cannot block the child.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).ok();
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).ok();
        v
    });
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let elapsed = started.elapsed();
            return Some((
                Output {
                    status,
                    stdout: out_thread.join().unwrap(),
                    stderr: err_thread.join().unwrap(),
                },
                elapsed,
            ));
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn verbd(args: &[&std::ffi::OsStr]) -> Output {
    verbd_within(args, Duration::from_secs(120))
        .expect("verbd ran for two minutes")
        .0
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// Every character of `bytes` that would act on the operator's terminal (anything
/// `terminal::is_hidden` names, except the newline that ends a line), with its offset.
fn hidden_characters(bytes: &[u8]) -> Vec<(usize, char)> {
    String::from_utf8_lossy(bytes)
        .char_indices()
        .filter(|(_, c)| *c != '\n' && is_hidden(*c))
        .collect()
}

fn show(bytes: &[u8]) -> String {
    verbd::terminal::escape(&String::from_utf8_lossy(bytes)).replace("\\n", "\n")
}

/// The forged-screen attack: on the old code `suggest` printed ESC and CR raw in the `# Not
/// suggested:` comments and in the first-seen comment of a drafted verb, bidi overrides raw in
/// TOML strings, and `coverage` printed the agent's file names raw in its report and on stderr.
#[test]
fn agent_text_reaches_the_operator_only_escaped() {
    let dir = agent_dir();
    let policy = write(dir.path(), "policy.toml", POLICY.as_bytes());
    // A directory and file name that retitle the terminal and clear the line.
    let sub = dir.path().join("proj\x1b]0;ok\x07\x1b[2K");
    std::fs::create_dir(&sub).unwrap();
    let history = concat!(
        // Drafted: `rm` over /srv/app/cache; the first-seen comment carries the forgery.
        "rm -rf '/srv/app/cache/two\x1b[2K\r[verb.rm]\x1b[8m'\n",
        "rm -rf /srv/app/cache/three\n",
        // Not suggested: an interpreter, with a line-clearing tail.
        "python3 -c 'print(1)\x1b[1A\x1b[2K\r# nothing was skipped'\n",
        // An unknown program whose name reverses what follows it.
        "frob\u{202e}lm.exe --now\n",
        "frob\u{202e}lm.exe --later\n",
        // Paths that do not exist here: named in a comment.
        "cat '/srv/none\x1b[31m/a'\n",
        "cat '/srv/none\x1b[31m/b'\n",
        // Covered by the read-only rm verb: a DANGER line naming this file.
        "rm -rf /srv/app/cache/one\n",
    );
    write(&sub, "h\x1b[1A\x1b[2K.txt", history.as_bytes());
    let from = sub.as_os_str();

    let mut leaks = Vec::new();
    let suggest = verbd(&[
        os("policy"),
        os("suggest"),
        policy.as_os_str(),
        os("--from"),
        from,
    ]);
    assert_eq!(suggest.status.code(), Some(0), "{}", show(&suggest.stderr));
    println!(
        "policy suggest printed (escaped here):\n{}",
        show(&suggest.stdout)
    );
    leaks.push(("suggest stdout", hidden_characters(&suggest.stdout)));
    leaks.push(("suggest stderr", hidden_characters(&suggest.stderr)));
    for format in ["text", "json"] {
        let coverage = verbd(&[
            os("policy"),
            os("coverage"),
            policy.as_os_str(),
            os("--format"),
            os(format),
            os("--from"),
            from,
        ]);
        assert_eq!(
            coverage.status.code(),
            Some(1),
            "{}",
            show(&coverage.stderr)
        );
        if format == "text" {
            println!(
                "policy coverage printed (escaped here):\n{}",
                show(&coverage.stdout)
            );
            assert!(
                String::from_utf8_lossy(&coverage.stdout).contains("!!! DANGER"),
                "the read-only rm is not flagged"
            );
        } else {
            // Escaping is JSON's own: the values are unchanged for a parser.
            let report: serde_json::Value = serde_json::from_slice(&coverage.stdout).unwrap();
            assert!(
                report.to_string().contains('\u{202e}'),
                "the JSON lost the agent's text: {report}"
            );
        }
        leaks.push(("coverage stdout", hidden_characters(&coverage.stdout)));
        leaks.push(("coverage stderr", hidden_characters(&coverage.stderr)));
    }
    // stderr: a directory whose only transcript is unreadable, named to clear the screen.
    let broken = agent_dir();
    write(
        broken.path(),
        "\x1b]0;pwned\x07\x1b[2J.jsonl",
        b"{not json\n",
    );
    let failed = verbd(&[
        os("policy"),
        os("coverage"),
        policy.as_os_str(),
        os("--from"),
        broken.path().as_os_str(),
    ]);
    assert_eq!(failed.status.code(), Some(65), "{}", show(&failed.stderr));
    println!("stderr (escaped here): {}", show(&failed.stderr));
    leaks.push((
        "coverage stderr (no command read)",
        hidden_characters(&failed.stderr),
    ));

    let leaked: Vec<_> = leaks.iter().filter(|(_, l)| !l.is_empty()).collect();
    assert!(
        leaked.is_empty(),
        "raw terminal characters reached the operator: {leaked:?}"
    );
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("\\u{1b}]0;pwned"),
        "the bad file is not named: {}",
        show(&failed.stderr)
    );

    // What the operator pastes still says exactly what was recorded: the TOML decodes to the
    // agent's bytes (escaped as TOML escapes, never dropped).
    let drafted: toml::Table =
        toml::from_str(&String::from_utf8_lossy(&suggest.stdout)).expect("the draft is TOML");
    let verbs = drafted["verb"].as_table().unwrap();
    let frob = verbs
        .values()
        .find(|v| {
            v["command"].as_array().unwrap()[0]
                .as_str()
                .unwrap()
                .contains("frob")
        })
        .expect("the frob verb is drafted");
    assert!(
        frob["command"][0]
            .as_str()
            .unwrap()
            .ends_with("frob\u{202e}lm.exe"),
        "{frob}"
    );
}

/// The planted-directory attack. On the old code the walk followed `zero.jsonl ->
/// /dev/zero` (reading until memory ran out), opened `fifo.jsonl` and waited for a writer
/// forever, and four `x -> .` links made it exponential; the test ran the real CLI for at
/// most 60 s. Now: no link is followed, only regular files are read, a file is read up to a
/// cap, and each skipped entry is named.
#[test]
fn a_planted_transcript_directory_is_walked_safely_and_says_what_it_skipped() {
    let dir = agent_dir();
    let policy = write(dir.path(), "policy.toml", POLICY.as_bytes());
    let planted = agent_dir();
    let p = planted.path();
    write(p, "real.txt", b"uptime\n");
    std::os::unix::fs::symlink("/dev/zero", p.join("zero.jsonl")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", p.join("shadow.txt")).unwrap();
    nix::unistd::mkfifo(
        &p.join("fifo.jsonl"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    for name in ["a", "b", "c", "d"] {
        std::os::unix::fs::symlink(".", p.join(name)).unwrap();
    }
    // Sparse, larger than the per-file cap: a line of NULs and then a command.
    let big = std::fs::File::create(p.join("big.log")).unwrap();
    big.set_len(40 << 20).unwrap();
    drop(big);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(p.join("big.log"))
            .unwrap();
        f.write_all(b"\nfree -m\n").unwrap();
    }

    let limit = Duration::from_secs(60);
    let run = verbd_within(
        &[
            os("policy"),
            os("coverage"),
            policy.as_os_str(),
            os("--format"),
            os("json"),
            os("--from"),
            p.as_os_str(),
        ],
        limit,
    );
    let Some((out, took)) = run else {
        panic!("policy coverage did not finish within {limit:?} on the planted directory");
    };
    println!("coverage took {took:?}; stderr: {}", show(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!("problems: {:#}", report["problems"]);
    let commands: Vec<&str> = report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(commands, ["uptime"], "{report}");
    let problems = report["problems"].to_string();
    for (name, why) in [
        ("zero.jsonl", "symbolic link"),
        ("shadow.txt", "symbolic link"),
        ("fifo.jsonl", "not a regular file"),
        ("/a", "symbolic link"),
        ("big.log", "MiB"),
    ] {
        assert!(
            problems.contains(name) && problems.contains(why),
            "{name} ({why}) not reported: {problems}"
        );
    }
    // A FIFO named directly is refused too, at once.
    let direct = verbd_within(
        &[
            os("policy"),
            os("coverage"),
            policy.as_os_str(),
            os("--from"),
            p.join("fifo.jsonl").as_os_str(),
        ],
        Duration::from_secs(20),
    )
    .expect("a FIFO named on the command line hung the run");
    assert_eq!(
        direct.0.status.code(),
        Some(65),
        "{}",
        show(&direct.0.stderr)
    );
    assert!(
        String::from_utf8_lossy(&direct.0.stderr).contains("not a regular file"),
        "{}",
        show(&direct.0.stderr)
    );
    // The operator's own link on the command line is followed (they typed it), and still
    // only to a regular file.
    let own = dir.path().join("mine.txt");
    std::os::unix::fs::symlink(p.join("real.txt"), &own).unwrap();
    let followed = verbd(&[
        os("policy"),
        os("coverage"),
        policy.as_os_str(),
        os("--format"),
        os("json"),
        os("--from"),
        own.as_os_str(),
    ]);
    assert_eq!(
        followed.status.code(),
        Some(0),
        "{}",
        show(&followed.stderr)
    );
}

/// History that runs code through an option: every line below was drafted by `suggest` on the
/// old code (as `mutating` or even `read-only` verbs); the docs promise it never drafts an exec
/// wrapper. Now each is left out, with the option named; `journalctl --output-fields` (a plain
/// option that runs nothing) is still drafted.
#[test]
fn suggest_refuses_option_level_exec_and_says_which_option() {
    let dir = agent_dir();
    let policy = write(dir.path(), "policy.toml", POLICY.as_bytes());
    let attacks: &[(&str, &str)] = &[
        (
            "tar -cf /tmp/a.tar --checkpoint=1 --checkpoint-action=exec=id /srv/app",
            "--checkpoint-action",
        ),
        ("tar -xf /tmp/a.tar --to-command=id", "--to-command"),
        (
            "tar --use-compress-program=id -cf /tmp/c.tar /srv/app",
            "--use-compress-program",
        ),
        ("tar -I id -cf /tmp/d.tar /srv/app", "-I"),
        ("zip -T -TT id /tmp/a.zip /srv/app/f", "-TT"),
        ("tcpdump -i eth0 -w /tmp/x.pcap -G 10 -z /tmp/evil", "-z"),
        ("rsync -e /tmp/evil /srv/app/ backup:/srv/app/", "-e"),
        ("git -c core.pager=id log -1", "-c"),
        ("git fetch --upload-pack=id origin", "--upload-pack"),
        ("find /srv/app -name x -fprint /root/.bashrc", "-fprint"),
        ("LESSOPEN='|id %s' less /etc/hosts", "LESSOPEN"),
        (
            "scp -o ProxyCommand=id /srv/app/f backup:/srv/",
            "ProxyCommand",
        ),
        ("ssh -o LocalCommand=id backup uptime", "ssh"),
        ("awk 'BEGIN{system(\"id\")}'", "system"),
        ("sed -n '1e id' /etc/hosts", "1e id"),
        ("sed 's/a/id/e' /etc/hosts", "s/a/id/e"),
        ("vim -c '!id' /etc/hosts", "vim"),
    ];
    let mut history = String::new();
    for (line, _) in attacks {
        history.push_str(line);
        history.push('\n');
    }
    // Controls: still drafted.
    history.push_str("journalctl -u nginx --output-fields=MESSAGE -o json\n");
    history.push_str("journalctl -u ssh --output-fields=MESSAGE -o json\n");
    history.push_str("sed -n 5p /etc/hosts\n");
    let from = write(dir.path(), "history.txt", history.as_bytes());
    let out = verbd(&[
        os("policy"),
        os("suggest"),
        policy.as_os_str(),
        os("--from"),
        from.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    let drafted: toml::Table = toml::from_str(&text).expect("the draft is TOML");
    let verbs = drafted
        .get("verb")
        .and_then(|v| v.as_table())
        .cloned()
        .unwrap_or_default();
    let commands: Vec<String> = verbs
        .values()
        .map(|v| {
            v["command"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let skipped: Vec<&str> = text
        .split("# Not suggested:\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .collect();
    let mut drafted_attacks = Vec::new();
    for (line, option) in attacks {
        let program = line.split_whitespace().find(|w| !w.contains('=')).unwrap();
        let said = skipped
            .iter()
            .any(|s| s.contains(&line[..line.len().min(12)]) && s.contains(option));
        let as_verb = commands.iter().any(|c| {
            let runs_program = c
                .split_whitespace()
                .next()
                .is_some_and(|p| p.ends_with(&format!("/{program}")));
            runs_program && (c.contains(option) || *option == program || *option == "LESSOPEN")
        });
        if as_verb || !said {
            drafted_attacks.push((*line, as_verb, said));
        }
    }
    assert!(
        drafted_attacks.is_empty(),
        "option-level exec drafted or not explained (line, drafted, explained): {drafted_attacks:#?}"
    );
    assert!(
        commands
            .iter()
            .any(|c| c.contains("--output-fields=MESSAGE")),
        "journalctl --output-fields was not drafted: {commands:?}"
    );
    assert!(
        commands.iter().any(|c| c.ends_with("sed -n 5p /etc/hosts")),
        "a plain sed script was not drafted: {commands:?}"
    );
}
