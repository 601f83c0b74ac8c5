//! The audit trail in the operator's log pipeline, tested against real components: a real
//! `systemd-journald` (in a private mount namespace, so it owns a private `/run` and the host is
//! untouched) receives a real `verbd serve`'s entries over the native datagram protocol at its
//! standard socket; `journalctl` reads them back; `systemd-journal-upload` ships them over HTTP
//! to a real `systemd-journal-remote`, whose journal file `journalctl --file` reads on the
//! "central" side and which still proves a cut-off tail on the host.
//!
//! The attack: an agent writes a file (content) or a destructive verb prints data in its dry run;
//! the journal holds that (content in the proposal the approver must see, dry-run output), and a
//! generic rendering of the record would carry it into journald and from there to every log
//! shipper. Nothing but sizes and hashes of it may leave.
use crate::common;
use common::harness::write_secret;
use common::policy::{Category, Param, ParamType, Policy, Secret, Verb};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: u32 = 61301;
const SRE: u32 = 61302;
const SECRET: &str = "tok-Secret-Value-4242-zz";
const CONTENT_MARK: &str = "FILE-CONTENT-MARK-7f3a";
const DRY_RUN_MARK: &str = "DRY-RUN-OUTPUT-MARK-91c2";

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .agents("agent", &[AGENT, 63020])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello {word}")
                .description("say hello")
                .roles(&["agent"])
                .param("word", Param::matching("[a-z]+")),
        )
        .verb(
            "note",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/notes"])
                .description("write a note (approval)")
                .roles(&["agent"]),
        )
        .verb(
            "drop",
            Verb::command(Category::Destructive, "/bin/echo dropping {name}")
                .description("drop a thing (dry run first)")
                .roles(&["agent"])
                .dry_run_argv(&[
                    "/usr/bin/printf",
                    &format!("would drop %s using %s {DRY_RUN_MARK}\n"),
                    "{name}",
                    "${secret:tok}",
                ])
                .param("name", Param::of(ParamType::K8sName)),
        )
}

/// A temp dir holding the policy, its secret and the notes directory, for a daemon that
/// logs to journald.
fn prepared_dir() -> tempfile::TempDir {
    let dir = open_tempdir();
    let d = dir.path();
    std::fs::write(
        d.join("policy.toml"),
        policy().render().replace("@DIR@", d.to_str().unwrap()),
    )
    .unwrap();
    write_secret(&d.join("tok"), SECRET);
    std::fs::create_dir(d.join("notes")).unwrap();
    dir
}

/// A precondition (a tool) is missing: a failure under CI, a loud skip otherwise.
fn missing(what: &str) -> bool {
    common::skip::skip_or_fail(
        "fleet_journald",
        &format!("{what} is missing (.ci/run installs it)"),
    );
    true
}

const JOURNALD: &str = "/lib/systemd/systemd-journald";
const JOURNAL_REMOTE: &str = "/lib/systemd/systemd-journal-remote";
const JOURNAL_UPLOAD: &str = "/lib/systemd/systemd-journal-upload";

/// A real systemd-journald with its own `/run` (a tmpfs in a private mount namespace): its
/// native socket is `/run/systemd/journal/socket` inside that namespace, its volatile journal
/// `/run/log/journal`. Killed (and its namespace with it) on drop.
struct RealJournald {
    child: Child,
}

impl RealJournald {
    fn start() -> Option<RealJournald> {
        if !Path::new(JOURNALD).exists() {
            missing("systemd-journald (package systemd)");
            return None;
        }
        // unshare execs sh, sh execs journald: the child's pid is journald's. A drop-in in the
        // private /run (read after /etc's journald.conf) keeps it volatile, so it never writes
        // to a persistent /var/log/journal of the host, and off the kernel log.
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "/bin/sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o mode=0755 tmpfs /run \
                 && mkdir -p /run/systemd/journald.conf.d \
                 && printf '[Journal]\\nStorage=volatile\\nReadKMsg=no\\nForwardToSyslog=no\\nForwardToWall=no\\n' \
                    > /run/systemd/journald.conf.d/zz-verbd-test.conf \
                 && exec {JOURNALD}"
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn unshare + systemd-journald");
        let journald = RealJournald { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !journald.inside("run/systemd/journal/socket").exists() {
            assert!(
                Instant::now() < deadline,
                "systemd-journald never bound its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(journald)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A path inside journald's mount namespace, reachable from outside through /proc.
    fn inside(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/{path}", self.pid()))
    }

    /// `verbd serve` in journald's mount namespace: it finds journald at the standard socket,
    /// exactly as on a systemd host.
    fn spawn_daemon(&self, dir: &Path) -> Child {
        Command::new("nsenter")
            .arg("--target")
            .arg(self.pid().to_string())
            .arg("--mount")
            .arg("--")
            .arg(BIN)
            .arg("serve")
            .arg("--policy")
            .arg(dir.join("policy.toml"))
            .arg("--socket")
            .arg(dir.join("verbd.sock"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .env_remove("VERBD_JOURNALD_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .expect("spawn verbd serve under nsenter")
    }

    /// `journalctl -D … -o json SYSLOG_IDENTIFIER=verbd`, parsed.
    fn verbd_entries(&self) -> Vec<BTreeMap<String, Value>> {
        journalctl(&["-D", self.inside("run/log/journal").to_str().unwrap()])
    }
}

impl Drop for RealJournald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn journalctl(source: &[&str]) -> Vec<BTreeMap<String, Value>> {
    let out = Command::new("journalctl")
        .args(source)
        .args(["--no-pager", "-o", "json", "SYSLOG_IDENTIFIER=verbd"])
        .output()
        .expect("run journalctl");
    assert!(out.status.success(), "journalctl failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("journalctl -o json line"))
        .collect()
}

fn text(entry: &BTreeMap<String, Value>, field: &str) -> String {
    match entry.get(field) {
        Some(Value::String(s)) => s.clone(),
        other => panic!("{field} is {other:?} in {entry:?}"),
    }
}

/// Every record of the daemon's journal (all segments, `audit export`), each with `"hash"` set
/// to its chain hash (the sha256 of its line).
fn journal_records(state: &Path) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["audit", "export", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            record["hash"] = Value::String(verbd::digest::sha256_hex(line.as_bytes()));
            record
        })
        .collect()
}

fn wait_ready(socket: &Path, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "daemon did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cli_as(socket: &Path, uid: u32, args: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    Command::new(BIN)
        .args(args)
        .env("VERBD_SOCKET", socket)
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap()
}

fn stop(mut daemon: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = daemon.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a day in the life against a daemon logging to `journald`: a read-only call, a refused
/// one, an approved file write whose content carries a marker, a refused file write with the
/// marker, a destructive proposal whose dry run prints a marker and the secret, denied.
/// Returns the temp dir, the daemon's pid and its state dir (the daemon has stopped).
fn a_day_of_calls(journald: &RealJournald) -> (tempfile::TempDir, u32, PathBuf) {
    let dir = prepared_dir();
    let d = dir.path();
    let daemon = journald.spawn_daemon(d);
    let pid = daemon.id();
    let socket = d.join("verbd.sock");
    wait_ready(&socket, &d.join("daemon.log"));
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();

    let out = cli_as(&socket, AGENT, &["call", "hello", "word=world"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    let out = cli_as(&socket, AGENT, &["call", "hello", "word=$(id)"]);
    assert_eq!(out.status.code(), Some(65), "{out:?}");

    let note = d.join("notes/n.txt");
    let content = format!("content={CONTENT_MARK} line one\nline two");
    let out = cli_as(
        &socket,
        AGENT,
        &[
            "call",
            "--json",
            "note",
            &format!("path={}", note.display()),
            &content,
        ],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let proposal: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = proposal["id"].as_u64().unwrap().to_string();
    let hash = proposal["hash"].as_str().unwrap().to_string();
    let out = cli_as(&socket, SRE, &["approve", &id, "--hash", &hash[..16]]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        std::fs::read_to_string(&note)
            .unwrap()
            .starts_with(CONTENT_MARK)
    );
    let out = cli_as(
        &socket,
        AGENT,
        &["call", "note", "path=/etc/verbd-nowhere", &content],
    );
    assert_ne!(out.status.code(), Some(0), "{out:?}");

    let out = cli_as(&socket, AGENT, &["call", "--json", "drop", "name=web"]);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let proposal: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = proposal["id"].as_u64().unwrap().to_string();
    let out = cli_as(&socket, SRE, &["deny", &id, "--reason", "not today"]);
    assert!(out.status.success(), "{out:?}");
    stop(daemon);
    let state = d.join("state");
    (dir, pid, state)
}

/// Waits until journald holds an entry for every record of the daemon's journal.
fn entries_for_all_records(
    read: impl Fn() -> Vec<BTreeMap<String, Value>>,
    records: &[Value],
) -> Vec<BTreeMap<String, Value>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let entries = read();
        if entries.len() >= records.len() || Instant::now() > deadline {
            return entries;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn file_content_dry_run_output_and_secrets_never_reach_journald() {
    if !require_root("file_content_dry_run_output_and_secrets_never_reach_journald") {
        return;
    }
    let Some(journald) = RealJournald::start() else {
        return;
    };
    let (_dir, _pid, state) = a_day_of_calls(&journald);
    let records = journal_records(&state);
    // The journal itself holds the content (the approver had to see it) and the dry-run output:
    // this is what a careless rendering would forward.
    let journal_text = records.iter().map(Value::to_string).collect::<String>();
    assert!(journal_text.contains(CONTENT_MARK), "precondition");
    assert!(journal_text.contains(DRY_RUN_MARK), "precondition");
    let entries = entries_for_all_records(|| journald.verbd_entries(), &records);
    assert!(!entries.is_empty(), "journald received nothing");
    let mut leaks = Vec::new();
    for entry in &entries {
        let rendered = serde_json::to_string(entry).unwrap();
        for (mark, what) in [
            (CONTENT_MARK, "file content"),
            (DRY_RUN_MARK, "dry-run output"),
            (SECRET, "a secret"),
        ] {
            if rendered.contains(mark) {
                leaks.push(format!(
                    "{what} reached journald: {}",
                    text(entry, "MESSAGE")
                ));
            }
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
}

/// `kind` → `MESSAGE_ID` as docs/fleet.md's table lists them.
fn documented_message_ids() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fleet.md"))
        .expect("docs/fleet.md");
    let mut ids = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() > 3
            && let (Some(kind), Some(id)) = (
                cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`')),
                cells[2].strip_prefix('`').and_then(|c| c.strip_suffix('`')),
            )
            && id.len() == 32
            && id.bytes().all(|b| b.is_ascii_hexdigit())
        {
            ids.insert(kind.to_string(), id.to_string());
        }
    }
    ids
}

#[test]
fn every_record_reaches_a_real_journald_with_its_documented_fields() {
    if !require_root("every_record_reaches_a_real_journald_with_its_documented_fields") {
        return;
    }
    let Some(journald) = RealJournald::start() else {
        return;
    };
    let (_dir, pid, state) = a_day_of_calls(&journald);
    let records = journal_records(&state);
    let entries = entries_for_all_records(|| journald.verbd_entries(), &records);
    let ids = documented_message_ids();
    let by_seq: BTreeMap<String, &BTreeMap<String, Value>> = entries
        .iter()
        .map(|entry| (text(entry, "VERBD_SEQ"), entry))
        .collect();
    assert_eq!(entries.len(), records.len(), "one entry per record");
    for record in &records {
        let seq = record["seq"].to_string();
        let kind = record["event"]["kind"].as_str().unwrap();
        let entry = by_seq
            .get(&seq)
            .unwrap_or_else(|| panic!("no journald entry for seq {seq} ({kind})"));
        println!("{seq:>3} {kind:<24} {}", text(entry, "MESSAGE"));
        assert_eq!(text(entry, "SYSLOG_IDENTIFIER"), "verbd");
        assert_eq!(text(entry, "VERBD_EVENT"), kind);
        assert_eq!(
            text(entry, "VERBD_CHAIN"),
            record["hash"].as_str().unwrap(),
            "the entry carries the record's chain hash"
        );
        assert_eq!(
            text(entry, "MESSAGE_ID"),
            ids.get(kind)
                .unwrap_or_else(|| panic!("`{kind}` is not in docs/fleet.md's MESSAGE_ID table"))
                .as_str()
        );
        // Trusted fields journald adds itself: the sender is the daemon, over the native socket.
        assert_eq!(text(entry, "_PID"), pid.to_string());
        assert_eq!(text(entry, "_TRANSPORT"), "journal");
        let message = text(entry, "MESSAGE");
        assert!(message.contains(&format!("#{seq} {kind}")), "{message}");
    }
    let of_kind = |kind: &str| -> Vec<&BTreeMap<String, Value>> {
        entries
            .iter()
            .filter(|e| text(e, "VERBD_EVENT") == kind)
            .collect()
    };
    let exec = of_kind("exec");
    assert_eq!(text(exec[0], "VERBD_VERB"), "hello");
    assert_eq!(text(exec[0], "VERBD_CALLER_UID"), AGENT.to_string());
    assert_eq!(text(exec[0], "VERBD_DECISION"), "run");
    assert_eq!(text(exec[1], "VERBD_DECISION"), "approved");
    assert_eq!(text(exec[1], "VERBD_PROPOSAL"), "1");
    let created = of_kind("proposal_created");
    assert_eq!(text(created[0], "VERBD_VERB"), "note");
    assert_eq!(text(created[0], "VERBD_CALLER_UID"), AGENT.to_string());
    assert_eq!(text(created[0], "VERBD_PROPOSAL"), "1");
    let args_hash = text(created[0], "VERBD_ARGS_HASH");
    assert_eq!(args_hash.len(), 64);
    assert!(
        text(created[0], "MESSAGE").contains("content=\"<"),
        "content shown as size and hash: {}",
        text(created[0], "MESSAGE")
    );
    let approved = of_kind("proposal_approved");
    assert_eq!(text(approved[0], "VERBD_BY_UID"), SRE.to_string());
    assert_eq!(text(approved[0], "VERBD_ARGS_HASH"), args_hash);
    let denied = of_kind("proposal_denied");
    assert_eq!(text(denied[0], "VERBD_BY_UID"), SRE.to_string());
    assert_eq!(text(denied[0], "VERBD_PROPOSAL"), "2");
    let refused = of_kind("refused");
    assert_eq!(refused.len(), 2);
    assert_eq!(text(refused[0], "VERBD_DECISION"), "invalid");
    assert_eq!(text(refused[0], "PRIORITY"), "5");
}

fn free_local_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real `systemd-journal-remote` writing what it receives over HTTP to one journal file.
struct JournalRemote {
    child: Child,
    output: PathBuf,
    url: String,
}

impl JournalRemote {
    fn start(dir: &Path) -> Option<JournalRemote> {
        if !Path::new(JOURNAL_REMOTE).exists() {
            missing("systemd-journal-remote (package systemd-journal-remote)");
            return None;
        }
        let port = free_local_port();
        let output = dir.join("remote.journal");
        let child = Command::new(JOURNAL_REMOTE)
            .arg(format!("--listen-http=127.0.0.1:{port}"))
            .arg("--split-mode=none")
            .arg(format!("--output={}", output.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("remote.log")).unwrap())
            .spawn()
            .expect("spawn systemd-journal-remote");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "journal-remote never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(JournalRemote {
            child,
            output,
            url: format!("http://127.0.0.1:{port}"),
        })
    }

    /// Stops it (it closes the journal file) and returns the file.
    fn finish(mut self) -> PathBuf {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        self.output.clone()
    }
}

impl Drop for JournalRemote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn entries_ship_through_journal_upload_and_remote_and_prove_a_cut_tail() {
    if !require_root("entries_ship_through_journal_upload_and_remote_and_prove_a_cut_tail") {
        return;
    }
    let Some(journald) = RealJournald::start() else {
        return;
    };
    if !Path::new(JOURNAL_UPLOAD).exists() {
        missing("systemd-journal-upload (package systemd-journal-remote)");
        return;
    }
    let (dir, pid, state) = a_day_of_calls(&journald);
    let records = journal_records(&state);
    entries_for_all_records(|| journald.verbd_entries(), &records);
    let Some(remote) = JournalRemote::start(dir.path()) else {
        return;
    };
    // The host side of the fleet pipeline: systemd-journal-upload reads the local journal and
    // posts it (journal export format over HTTP) to the central journal-remote.
    let upload = Command::new(JOURNAL_UPLOAD)
        .arg(format!("--url={}", remote.url))
        .arg("--directory")
        .arg(journald.inside("run/log/journal"))
        .arg("--follow=no")
        .output()
        .unwrap();
    assert!(upload.status.success(), "journal-upload: {upload:?}");
    let central = remote.finish();
    // The central side: journalctl on the file journal-remote wrote.
    let shipped = journalctl(&["--file", central.to_str().unwrap()]);
    assert_eq!(
        shipped.len(),
        records.len(),
        "every record arrived centrally"
    );
    for (record, entry) in records.iter().zip(&shipped) {
        assert_eq!(text(entry, "VERBD_SEQ"), record["seq"].to_string());
        assert_eq!(text(entry, "VERBD_CHAIN"), record["hash"].as_str().unwrap());
        assert_eq!(text(entry, "_PID"), pid.to_string());
        assert!(entry.contains_key("_HOSTNAME") && entry.contains_key("_BOOT_ID"));
    }

    // The central copy is a witness root on the host cannot reach. docs/fleet.md's recipe turns
    // it into heads for `audit verify --witness`, word for word.
    let mut journalctl_json = Command::new("journalctl")
        .args(["--file", central.to_str().unwrap()])
        .args(["-o", "json", "SYSLOG_IDENTIFIER=verbd"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let jq = Command::new("jq")
        .args([
            "-c",
            "{seq: (.VERBD_SEQ|tonumber), epoch: (.VERBD_EPOCH|tonumber), hash: .VERBD_CHAIN}",
        ])
        .stdin(journalctl_json.stdout.take().unwrap())
        .output();
    assert!(journalctl_json.wait().unwrap().success());
    let heads = match jq {
        Ok(out) if out.status.success() => out.stdout,
        Ok(out) => panic!("jq failed: {out:?}"),
        Err(_) => {
            missing("jq");
            return;
        }
    };
    let heads_path = dir.path().join("central-heads.jsonl");
    std::fs::write(&heads_path, heads).unwrap();
    let export = dir.path().join("export.jsonl");
    let out = Command::new(BIN)
        .args(["audit", "export", "--state-dir"])
        .arg(&state)
        .arg("--output")
        .arg(&export)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let verify = |file: &Path| {
        Command::new(BIN)
            .args(["audit", "verify", "--file"])
            .arg(file)
            .arg("--witness")
            .arg(&heads_path)
            .output()
            .unwrap()
    };
    // Positive control: the host's journal as it is agrees with the central heads.
    let out = verify(&export);
    assert!(out.status.success(), "{out:?}");
    // Root on the host cuts the last three records: the central heads name them.
    let full = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, lines[..lines.len() - 3].join("\n") + "\n").unwrap();
    let out = verify(&cut);
    let report =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    println!("{report}");
    assert_eq!(out.status.code(), Some(1), "{report}");
    let (first_missing, last) = (records.len() - 2, records.len());
    assert!(
        report.contains(&format!(
            "records seq {first_missing} to {last} are missing from the end"
        )),
        "{report}"
    );
}

/// Every kind the daemon can journal: the variants of `events::Event` (snake_case, as serde
/// tags them) and the journal layer's own `journal_*` kinds, read from the source.
fn kinds_in_source() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let events = std::fs::read_to_string(root.join("src/events.rs")).unwrap();
    let body = events
        .split_once("pub enum Event {\n")
        .expect("events.rs declares `pub enum Event`")
        .1;
    let body = &body[..body.find("\n}\n").unwrap()];
    let mut kinds: Vec<String> = body
        .lines()
        .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
        .filter_map(|line| {
            let name = line.trim().split([' ', ',', '{']).next()?;
            name.starts_with(|c: char| c.is_ascii_uppercase()).then(|| {
                name.chars()
                    .enumerate()
                    .fold(String::new(), |mut out, (i, c)| {
                        if c.is_ascii_uppercase() && i > 0 {
                            out.push('_');
                        }
                        out.push(c.to_ascii_lowercase());
                        out
                    })
            })
        })
        .collect();
    assert!(kinds.len() >= 20, "read only {kinds:?} from events.rs");
    let mut files = Vec::new();
    let mut folders = vec![root.join("src/journal")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for file in files {
        let source = std::fs::read_to_string(file).unwrap();
        for piece in source.split('"').skip(1).step_by(2) {
            if piece.len() > "journal_".len()
                && piece.starts_with("journal_")
                && piece.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            {
                kinds.push(piece.to_string());
            }
        }
    }
    kinds.sort();
    kinds.dedup();
    kinds
}

#[test]
fn the_message_id_table_covers_every_event_kind_with_its_id() {
    let documented = documented_message_ids();
    let kinds = kinds_in_source();
    println!("{kinds:?}");
    for kind in &kinds {
        let id = documented
            .get(kind)
            .unwrap_or_else(|| panic!("`{kind}` has no row in docs/fleet.md's MESSAGE_ID table"));
        assert_eq!(id, &verbd::journal::message_id(kind), "{kind}");
    }
    let extra: Vec<&String> = documented.keys().filter(|k| !kinds.contains(k)).collect();
    assert!(
        extra.is_empty(),
        "the table lists kinds the code lacks: {extra:?}"
    );
}

/// The hostile agent of the field-forging attack.
const FORGER: u32 = 63020;

/// An agent's text reaches journald in a refused call's verb name (`VERBD_VERB`) and in its
/// arguments, written to add fields to the entry: `PRIORITY=0` (an emergency to every alerting
/// rule), a forged `VERBD_DECISION`, `VERBD_CALLER_UID=0`, `MESSAGE_ID` and `SYSLOG_IDENTIFIER`.
/// Read back from a real journald: every entry has each field once, with the daemon's values;
/// the agent's text is inside `VERBD_VERB`'s value only, and `MESSAGE` is one line.
#[test]
fn agent_text_cannot_add_a_field_to_a_journald_entry() {
    if !require_root("agent_text_cannot_add_a_field_to_a_journald_entry") {
        return;
    }
    let Some(journald) = RealJournald::start() else {
        return;
    };
    let dir = prepared_dir();
    let d = dir.path();
    let daemon = journald.spawn_daemon(d);
    let socket = d.join("verbd.sock");
    wait_ready(&socket, &d.join("daemon.log"));
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let forged = "\nPRIORITY=0\nVERBD_DECISION=allowed\nVERBD_CALLER_UID=0\n\
                  MESSAGE_ID=00000000000000000000000000000000\nSYSLOG_IDENTIFIER=verbd\n";
    let verb = format!("hello{forged}");
    let out = cli_as(&socket, FORGER, &["call", &verb, "word=x"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let arg = format!("word=x{forged}");
    let out = cli_as(&socket, FORGER, &["call", "hello", &arg]);
    assert_eq!(out.status.code(), Some(65), "{out:?}");
    stop(daemon);
    let records = journal_records(&d.join("state"));
    let entries = entries_for_all_records(|| journald.verbd_entries(), &records);
    assert!(
        entries.len() >= records.len(),
        "{} entries for {} records",
        entries.len(),
        records.len()
    );
    let mut forged_verbs = 0;
    for entry in &entries {
        let rendered = serde_json::to_string(entry).unwrap();
        // In `journalctl -o json` a field given twice is an array of its values; a value with
        // bytes that are not printable is an array of numbers.
        for (name, value) in entry {
            if let Value::Array(items) = value {
                assert!(
                    items.iter().all(Value::is_u64),
                    "{name} appears more than once: {rendered}"
                );
            }
        }
        assert_ne!(text(entry, "PRIORITY"), "0", "{rendered}");
        assert_ne!(
            entry.get("MESSAGE_ID").and_then(Value::as_str),
            Some("00000000000000000000000000000000"),
            "{rendered}"
        );
        if let Some(uid) = entry.get("VERBD_CALLER_UID") {
            assert_eq!(uid, &Value::String(FORGER.to_string()), "{rendered}");
        }
        if let Some(decision) = entry.get("VERBD_DECISION") {
            assert_ne!(decision, "allowed", "{rendered}");
        }
        assert!(!text(entry, "MESSAGE").contains('\n'), "{rendered}");
        if entry
            .get("VERBD_VERB")
            .is_some_and(|value| bytes_of(value) == verb.as_bytes())
        {
            forged_verbs += 1;
        }
    }
    println!(
        "{} entries for {} records; the forged verb name arrived whole in {forged_verbs} \
         VERBD_VERB value(s)",
        entries.len(),
        records.len()
    );
    assert!(
        forged_verbs >= 1,
        "the refused call's entry carries the verb name as its value"
    );
}

/// A `journalctl -o json` value as bytes: a string, or an array of byte values.
fn bytes_of(value: &Value) -> Vec<u8> {
    match value {
        Value::String(text) => text.as_bytes().to_vec(),
        Value::Array(items) => items
            .iter()
            .map(|item| u8::try_from(item.as_u64().unwrap()).unwrap())
            .collect(),
        other => panic!("not a journald value: {other}"),
    }
}
