//! Streaming verbs (issue 29): a verb declared with `stream = { … }` delivers its output while
//! it runs to a caller that asked for it, bounded by time and lines, scrubbed across chunk
//! boundaries and journaled; a caller that goes away kills it; an old caller gets one answer.
//! `verbd sh -c` prints a streaming verb's output as it comes too, through its filters.
//! Real `verbd serve`, real `tail -f`, callers at real uids (61201) through the CLI.
use crate::common;
use common::policy::{Category, CommandMode, Policy, Sandbox, Secret, Stream, Verb};
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response, StreamEnd};

const AGENT: u32 = 61201;

/// 66 bytes: its base64 (88 characters) wraps at 76 and 64 columns, so one of its forms spans
/// two lines.
const SECRET: &str = "streamed-S3cr3t-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKL";

/// The streaming verbs, `hello` that does not stream, and the secret they write; `agents` are
/// the uids of the agent role.
fn policy(agents: &[u32]) -> Policy {
    const DRIBBLE: &str = "echo start; fold -w1 \"$1\" | while read c || [ -n \"$c\" ]; do printf %s \"$c\"; sleep 0.01; done; echo; base64 \"$1\" | while read line; do printf '%s\\n' \"$line\" | fold -w1 | while read c || [ -n \"$c\" ]; do printf %s \"$c\"; sleep 0.01; done; echo; done; echo end";
    const DRIBBLE_SLOWLY: &str = "echo start; fold -w1 \"$1\" | while read c || [ -n \"$c\" ]; do printf %s \"$c\"; sleep 0.05; done; echo";
    Policy::new()
        .allow_root()
        .humans("me", &[0])
        .agents("agent", agents)
        .commands("agent", CommandMode::Rewrite)
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .verb(
            "follow",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/usr/bin/tail",
                    "-n",
                    "+1",
                    "-s",
                    "0.2",
                    "-f",
                    "@DIR@/logs/app.log",
                ],
            )
            .description("follows the application log")
            .roles(&["agent", "me"])
            .sandbox("logs")
            .stream(Stream {
                max_duration: "20s".into(),
                max_lines: Some(5),
            }),
        )
        .sandbox("logs", Sandbox::new(&["/usr", "/etc", "@DIR@/logs"], &[]))
        .verb(
            "dribble",
            Verb::argv(
                Category::ReadOnly,
                &["/bin/sh", "-c", DRIBBLE, "dribble", "${secret_file:tok}"],
            )
            .description("writes the secret one byte per write, raw and in base64 (wrapped at 76)")
            .roles(&["agent", "me"])
            .allow_interpreter()
            .stream(Stream {
                max_duration: "60s".into(),
                max_lines: None,
            }),
        )
        .verb(
            "dribble-slowly",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    DRIBBLE_SLOWLY,
                    "dribble",
                    "${secret_file:tok}",
                ],
            )
            .description("writes the secret one byte per write, slowly (a time bound cuts it)")
            .roles(&["agent", "me"])
            .allow_interpreter()
            .stream(Stream {
                max_duration: "1s".into(),
                max_lines: None,
            }),
        )
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("does not stream")
                .roles(&["agent", "me"]),
        )
}

fn daemon() -> Daemon {
    let daemon = Daemon::start_with(&policy(&[AGENT]).render(), |dir| {
        std::fs::write(dir.join("tok"), SECRET).unwrap();
        std::fs::set_permissions(dir.join("tok"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::write(dir.join("logs/app.log"), "").unwrap();
    });
    daemon.open_socket();
    daemon
}

/// `verbd --json call …` as the agent's uid, its stdout read line by line as it comes.
struct Caller {
    child: Child,
    lines: mpsc::Receiver<(Instant, serde_json::Value)>,
}

impl Caller {
    fn start(daemon: &Daemon, args: &[&str]) -> Caller {
        let mut child = Command::new(BIN)
            .args(["call", "--json"])
            .args(args)
            .env("VERBD_SOCKET", &daemon.socket)
            .uid(AGENT)
            .gid(AGENT)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line).expect("the CLI prints JSON lines");
                if sender.send((Instant::now(), value)).is_err() {
                    return;
                }
            }
        });
        Caller { child, lines }
    }

    fn next(&self) -> (Instant, serde_json::Value) {
        self.lines
            .recv_timeout(Duration::from_secs(15))
            .expect("a line from the CLI within 15 s")
    }

    /// Every remaining line up to the final answer (the last), and the exit code.
    fn finish(mut self) -> (Vec<serde_json::Value>, i32) {
        let mut lines = Vec::new();
        while let Ok((_, line)) = self.lines.recv_timeout(Duration::from_secs(30)) {
            lines.push(line);
        }
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(status.code().is_some(), "CLI died: {status:?} {stderr}");
        (lines, status.code().unwrap())
    }
}

fn append(daemon: &Daemon, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(daemon.path("logs/app.log"))
        .unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

fn chunk_text(line: &serde_json::Value) -> &str {
    assert_eq!(line["status"], "chunk", "{line}");
    line["text"].as_str().unwrap()
}

/// The journal's `result` record of the last run of `verb`.
fn result_record(daemon: &Daemon, verb: &str) -> serde_json::Value {
    daemon
        .journal_events()
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "result" && e["verb"] == verb)
        .unwrap_or_else(|| panic!("no result record for {verb}:\n{}", daemon.journal()))
}

/// Any 12-byte piece of the secret or of its base64 in `text`.
fn secret_piece_in(text: &str) -> Option<String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
    for form in [SECRET, b64.as_str()] {
        for start in 0..=form.len() - 12 {
            if text.contains(&form[start..start + 12]) {
                return Some(form[start..start + 12].to_string());
            }
        }
    }
    None
}

fn no_process_follows(daemon: &Daemon) -> bool {
    let log = daemon.path("logs/app.log").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if processes_matching(&log).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The first line reaches the caller before the test writes the second: output is delivered
/// as `tail -f` prints it, and the line bound ends the run (tail killed, answer and journal
/// say `max_lines`, the CLI exits 0).
#[test]
fn a_followed_log_reaches_the_caller_line_by_line_until_the_line_bound() {
    if !require_root("a_followed_log_reaches_the_caller_line_by_line_until_the_line_bound") {
        return;
    }
    let daemon = daemon();
    let caller = Caller::start(&daemon, &["--max-lines", "3", "follow"]);
    std::thread::sleep(Duration::from_millis(300));
    append(&daemon, "one\n");
    let (first_at, first) = caller.next();
    assert_eq!(chunk_text(&first), "one\n");
    let second_written = Instant::now();
    assert!(first_at < second_written);
    append(&daemon, "two\n");
    let (_, second) = caller.next();
    assert_eq!(chunk_text(&second), "two\n");
    append(&daemon, "three\nfour\n");
    let (lines, code) = caller.finish();
    let (last, chunks) = lines.split_last().unwrap();
    let rest: String = chunks.iter().map(chunk_text).collect();
    assert_eq!(rest, "three\n", "lines past the bound are not delivered");
    assert_eq!(last["status"], "ok", "{last}");
    assert_eq!(last["ended_by"], "max_lines", "{last}");
    assert_eq!(last["stdout"], "one\ntwo\nthree\n", "{last}");
    assert_eq!(code, 0, "a stream that reached its bound ended as asked");
    assert!(no_process_follows(&daemon), "tail was left running");
    let record = result_record(&daemon, "follow");
    assert_eq!(record["ended_by"], "max_lines", "{record}");
    assert_eq!(record["stdout"]["kept"], 14, "{record}");
    assert_eq!(
        record["stdout"]["sha256"],
        verbd::digest::sha256_hex(b"one\ntwo\nthree\n"),
        "{record}"
    );
}

/// A quiet log: the time bound ends the run; the answer says so, nothing is left running.
#[test]
fn the_time_bound_ends_a_quiet_stream() {
    if !require_root("the_time_bound_ends_a_quiet_stream") {
        return;
    }
    let daemon = daemon();
    append(&daemon, "already there\n");
    let started = Instant::now();
    let caller = Caller::start(&daemon, &["--max-duration", "1500ms", "follow"]);
    let (_, first) = caller.next();
    assert_eq!(chunk_text(&first), "already there\n");
    let (lines, code) = caller.finish();
    let elapsed = started.elapsed();
    let last = lines.last().unwrap();
    assert_eq!(last["ended_by"], "max_duration", "{last}");
    assert_eq!(last["exit"]["timed_out"], false, "{last}");
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
    assert_eq!(code, 0);
    assert!(no_process_follows(&daemon), "tail was left running");
    assert_eq!(result_record(&daemon, "follow")["ended_by"], "max_duration");
}

/// The caller may ask for less than the verb's bounds, never more; a verb that does not stream
/// takes no bounds.
#[test]
fn a_caller_cannot_raise_the_bounds() {
    if !require_root("a_caller_cannot_raise_the_bounds") {
        return;
    }
    let daemon = daemon();
    for args in [
        &["--max-lines", "6", "follow"][..],
        &["--max-duration", "21s", "follow"],
        &["--max-lines", "1", "hello"],
    ] {
        let out = daemon.cli_as(AGENT, &[&["call"][..], args].concat());
        assert_eq!(out.status.code(), Some(65), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("stream"),
            "{out:?}"
        );
    }
    // Asking for nothing: a verb that does not stream answers once, as always.
    let out = daemon.cli_as(AGENT, &["call", "hello"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert_eq!(out.status.code(), Some(0));
}

/// A caller that goes away mid-stream: the child is killed and the run journaled `cancelled`.
#[test]
fn a_caller_that_goes_away_kills_the_stream() {
    if !require_root("a_caller_that_goes_away_kills_the_stream") {
        return;
    }
    let daemon = daemon();
    let mut caller = Caller::start(&daemon, &["follow"]);
    append(&daemon, "hello\n");
    let (_, first) = caller.next();
    assert_eq!(chunk_text(&first), "hello\n");
    let log = daemon.path("logs/app.log").display().to_string();
    assert!(!processes_matching(&log).is_empty(), "tail runs");
    caller.child.kill().unwrap();
    caller.child.wait().unwrap();
    assert!(no_process_follows(&daemon), "tail outlived its caller");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cancelled = daemon
            .journal_events()
            .into_iter()
            .any(|e| e["kind"] == "cancelled" && e["verb"] == "follow");
        if cancelled {
            break;
        }
        assert!(Instant::now() < deadline, "{}", daemon.journal());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The attack: a verb prints the secret one byte per write (raw, and base64 wrapped at 76 so a
/// form spans two lines), with pauses; no chunk, and not all chunks together, ever hold a
/// piece of it, while the whole forms are redacted.
#[test]
fn a_secret_written_byte_by_byte_never_leaks_from_a_stream() {
    if !require_root("a_secret_written_byte_by_byte_never_leaks_from_a_stream") {
        return;
    }
    let daemon = daemon();
    let caller = Caller::start(&daemon, &["dribble"]);
    let (lines, code) = caller.finish();
    let (last, chunks) = lines.split_last().unwrap();
    assert!(chunks.len() >= 2, "delivered as it came: {lines:?}");
    assert_eq!(chunk_text(&chunks[0]), "start\n");
    let mut all = String::new();
    for chunk in chunks {
        let text = chunk_text(chunk);
        assert_eq!(secret_piece_in(text), None, "chunk leaked: {text:?}");
        all.push_str(text);
    }
    assert_eq!(
        secret_piece_in(&all),
        None,
        "chunks together leaked: {all:?}"
    );
    assert_eq!(all.matches("[REDACTED:tok]").count(), 2, "{all}");
    assert!(
        all.starts_with("start\n") && all.ends_with("end\n"),
        "{all}"
    );
    assert_eq!(last["stdout"].as_str().unwrap(), all);
    assert_eq!(code, 0);

    // Cut by its time bound mid-secret: what was held is withheld, nothing of it shown.
    let caller = Caller::start(&daemon, &["dribble-slowly"]);
    let (lines, _) = caller.finish();
    let last = lines.last().unwrap();
    assert_eq!(last["ended_by"], "max_duration", "{last}");
    let shown: String = lines.iter().filter_map(|l| l["text"].as_str()).collect();
    assert_eq!(shown, "start\n");
    assert_eq!(last["stdout"], "start\n");
    assert!(last["stdout_withheld"].as_u64().unwrap() > 0, "{last}");
    assert_eq!(secret_piece_in(&last.to_string()), None);
}

/// A caller that does not ask for `stream` gets exactly one answer from a streaming verb (the
/// run still bounded), byte for byte the protocol it always spoke.
#[test]
fn a_caller_that_does_not_ask_gets_one_answer() {
    if !require_root("a_caller_that_does_not_ask_gets_one_answer") {
        return;
    }
    let daemon = daemon();
    append(&daemon, "1\n2\n3\n4\n5\n6\n");
    let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    stream
        .write_all(&verbd::protocol::encode_request(&Request::Call {
            verb: "follow".into(),
            args: Default::default(),
            reason: None,
            idempotency_key: None,
            stream: None,
        }))
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert_eq!(answer.iter().filter(|&&b| b == b'\n').count(), 1);
    match Response::decode(&answer).unwrap() {
        Response::Ok { result, .. } => {
            assert_eq!(result.stdout, "1\n2\n3\n4\n5\n");
            assert_eq!(result.ended_by, Some(StreamEnd::MaxLines));
        }
        other => panic!("{other:?}"),
    }
    assert!(no_process_follows(&daemon), "tail was left running");
}

/// `stream` is checked like every verb key: each error points at it and says what to fix.
#[test]
fn stream_declarations_are_checked() {
    let verb = |extra: &str| {
        format!(
            "version = 1\n[roles.a]\nuids = [61201]\n[verb.v]\ndescription = \"v\"\ncategory = \"read-only\"\nroles = [\"a\"]\ncommand = \"/usr/bin/tail -f /var/log/syslog\"\n{extra}\n"
        )
    };
    let compiled = verbd::policy::compile::compile(
        &verb("stream = { max_duration = \"60s\", max_lines = 10 }"),
        "p",
    )
    .unwrap();
    let bounds = compiled.verbs["v"].stream.unwrap();
    assert_eq!(bounds.max_duration, Duration::from_secs(60));
    assert_eq!(bounds.max_lines, Some(10));
    assert_eq!(compiled.verbs["v"].timeout, Duration::from_secs(60));
    for (extra, expected) in [
        ("stream = { max_lines = 10 }", "max_duration"),
        ("stream = { max_duration = \"16m\" }", "is above 900s"),
        ("stream = { max_duration = \"0s\" }", "must be above 0"),
        (
            "stream = { max_duration = \"soon\" }",
            "stream.max_duration",
        ),
        (
            "stream = { max_duration = \"1m\", max_lines = 0 }",
            "at least 1",
        ),
        (
            "stream = { max_duration = \"1m\", lines = 5 }",
            "unknown field",
        ),
        (
            "timeout = \"5s\"\nstream = { max_duration = \"1m\" }",
            "remove timeout",
        ),
    ] {
        let error = verbd::policy::compile::compile(&verb(extra), "p")
            .err()
            .unwrap_or_else(|| panic!("{extra} compiled"))
            .to_string();
        assert!(error.contains(expected), "{extra}: {error}");
        // Positioned like every policy error (`p:LINE:COL`).
        assert!(
            error.contains("p:9:") || error.contains("p:10:"),
            "{extra}: {error}"
        );
    }
}

/// One caller cannot hold every execution slot with streams: with 4 slots, one uid gets one
/// stream (a quarter), all streams together two (half); the other half stays for calls that end
/// on their own.
#[test]
fn streams_cannot_take_every_execution_slot() {
    if !require_root("streams_cannot_take_every_execution_slot") {
        return;
    }
    const OTHER: u32 = 61202;
    const THIRD: u32 = 61203;
    let policy = policy(&[AGENT, OTHER, THIRD]).max_executions(4).render();
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::write(dir.join("tok"), SECRET).unwrap();
        std::fs::set_permissions(dir.join("tok"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::write(dir.join("logs/app.log"), "ready\n").unwrap();
    });
    daemon.open_socket();
    let first = Caller::start(&daemon, &["follow"]);
    assert_eq!(chunk_text(&first.next().1), "ready\n");
    let refused = daemon.cli_as(AGENT, &["call", "follow"]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("uid 61201 already has 1 streaming"),
        "{refused:?}"
    );
    let mut second = Command::new(BIN)
        .args(["call", "--json", "follow"])
        .env("VERBD_SOCKET", &daemon.socket)
        .uid(OTHER)
        .gid(OTHER)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(second.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("ready"), "{line}");
    let refused = daemon.cli_as(THIRD, &["call", "follow"]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("maximum of 2 streaming calls"),
        "{refused:?}"
    );
    // The slots streams may not take still run everyone's other calls, at once.
    let started = Instant::now();
    let hello = daemon.cli_as(THIRD, &["call", "hello"]);
    assert_eq!(String::from_utf8_lossy(&hello.stdout), "hello\n");
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut first = first;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    second.kill().unwrap();
    second.wait().unwrap();
    assert!(no_process_follows(&daemon), "tail outlived its caller");
}

/// `verbd sh -c COMMAND` as the agent's uid, its stdout read line by line as it comes.
struct ShCaller {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl ShCaller {
    fn start(daemon: &Daemon, command: &str) -> ShCaller {
        let mut child = Command::new(BIN)
            .args(["sh", "-c", command])
            .env("VERBD_SOCKET", &daemon.socket)
            .current_dir("/")
            .uid(AGENT)
            .gid(AGENT)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        ShCaller { child, lines }
    }

    fn next(&self) -> (Instant, String) {
        self.lines
            .recv_timeout(Duration::from_secs(15))
            .expect("a line from verbd sh within 15 s")
    }

    /// The remaining lines, the exit code, stderr, and when the process had ended.
    fn finish(mut self) -> (Vec<String>, i32, String, Instant) {
        let status = self.child.wait().unwrap();
        let ended = Instant::now();
        let mut lines = Vec::new();
        while let Ok((_, line)) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(
            status.code().is_some(),
            "verbd sh died: {status:?} {stderr}"
        );
        (lines, status.code().unwrap(), stderr, ended)
    }

    fn has_exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

fn follow_command(daemon: &Daemon) -> String {
    format!(
        "tail -n +1 -s 0.2 -f {}",
        daemon.path("logs/app.log").display()
    )
}

/// `verbd sh -c 'tail -f …'` is the streaming verb `follow`: each line reaches the agent's
/// stdout while the verb still runs (before the test writes the next one), and the run ends
/// as `verbd call`'s does: at the verb's line bound, with its note on stderr, exit 0, no
/// `tail` left; the mapping and the run are journaled.
#[test]
fn verbd_sh_prints_a_streaming_verbs_output_as_it_comes() {
    if !require_root("verbd_sh_prints_a_streaming_verbs_output_as_it_comes") {
        return;
    }
    let daemon = daemon();
    let mut caller = ShCaller::start(&daemon, &follow_command(&daemon));
    std::thread::sleep(Duration::from_millis(300));
    append(&daemon, "one\n");
    let (first_at, first) = caller.next();
    assert_eq!(first, "one");
    assert!(!caller.has_exited(), "the first line came before the end");
    let second_written = Instant::now();
    assert!(first_at < second_written);
    append(&daemon, "two\n");
    assert_eq!(caller.next().1, "two");
    append(&daemon, "three\nfour\nfive\nsix\n");
    let (rest, code, stderr, _) = caller.finish();
    assert_eq!(
        rest,
        ["three", "four", "five"],
        "the verb's bound of 5 lines"
    );
    assert_eq!(
        code, 0,
        "a stream that reached its bound ended as asked: {stderr}"
    );
    assert!(
        stderr.contains("the stream reached its max_lines bound"),
        "{stderr}"
    );
    assert!(no_process_follows(&daemon), "tail was left running");
    let events = daemon.journal_events();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "command_mapped" && e["tool"] == "sh" && e["verb"] == "follow"),
        "{}",
        daemon.journal()
    );
    assert_eq!(result_record(&daemon, "follow")["ended_by"], "max_lines");
}

/// Through filters: each line goes through `grep` as it comes (`--line-buffered`: a filter's
/// own buffering is its business, as in a shell); when the filter has what it wanted (`-m 2`)
/// and stops reading, `verbd sh` hangs up, which ends the verb's run (as a shell pipeline's
/// producer dies of its broken pipe), long before the verb's 20 s bound; the exit code is the
/// last filter's.
#[test]
fn verbd_sh_feeds_a_stream_through_its_filters_and_hangs_up_when_they_are_done() {
    if !require_root("verbd_sh_feeds_a_stream_through_its_filters_and_hangs_up_when_they_are_done")
    {
        return;
    }
    let daemon = daemon();
    let started = Instant::now();
    let mut caller = ShCaller::start(
        &daemon,
        &format!("{} | grep --line-buffered -m 2 a", follow_command(&daemon)),
    );
    std::thread::sleep(Duration::from_millis(300));
    append(&daemon, "alpha\n");
    assert_eq!(caller.next().1, "alpha");
    assert!(!caller.has_exited(), "the first line came before the end");
    append(&daemon, "noise\nbeta\n");
    assert_eq!(caller.next().1, "beta");
    // `grep -m 2` has exited; the next chunk finds its pipe closed.
    std::thread::sleep(Duration::from_millis(300));
    append(&daemon, "gamma\n");
    let (rest, code, stderr, ended) = caller.finish();
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(code, 0, "grep's exit code: {stderr}");
    assert!(
        ended.duration_since(started) < Duration::from_secs(15),
        "verbd sh waited for the verb's bound"
    );
    assert!(no_process_follows(&daemon), "tail outlived the pipeline");
}
