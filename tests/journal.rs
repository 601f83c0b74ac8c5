//! Journal integration tests on real files: tampering of every kind is detected and named, torn
//! tails and ENOSPC (a real tiny tmpfs) leave the chain intact, permissions are enforced.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use verbd::journal::{
    self, CHECKPOINT_FILE, CHECKPOINT_INTERVAL, JOURNAL_FILE, Journal, JournalError, KEY_FILE,
    Problem, ProblemKind,
};

fn state_dir() -> TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn call_event(index: usize) -> Value {
    json!({
        "kind": "call",
        "caller": {"uid": 1000, "user": "alice", "pid": 4242},
        "verb": "restart",
        "args": {"unit": format!("svc{index}.service")},
        "decision": "allowed",
        "exit_code": 0,
    })
}

fn append_calls(dir: &Path, count: usize) -> Vec<journal::Appended> {
    let mut journal = Journal::open(dir).expect("open journal");
    (1..=count)
        .map(|index| journal.append(&call_event(index)).expect("append"))
        .collect()
}

fn journal_path(dir: &Path) -> PathBuf {
    dir.join(JOURNAL_FILE)
}

/// The journal's lines, without their newlines.
fn read_lines(dir: &Path) -> Vec<String> {
    let text = fs::read_to_string(journal_path(dir)).expect("read journal");
    assert!(text.ends_with('\n'));
    text.lines().map(str::to_owned).collect()
}

fn write_lines(dir: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    fs::write(journal_path(dir), text).expect("write journal");
}

fn problems(dir: &Path) -> Vec<Problem> {
    journal::verify(dir).expect("verify runs").problems
}

fn only_problem(dir: &Path) -> Problem {
    let found = problems(dir);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one problem, got {found:#?}"
    );
    found.into_iter().next().unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn append_then_verify_and_replay() {
    let dir = state_dir();
    let appended = append_calls(dir.path(), 5);
    assert_eq!(
        appended.iter().map(|a| a.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );

    let report = journal::verify(dir.path()).expect("verify");
    assert_eq!(report.records, 5);
    assert!(report.is_intact(), "{:#?}", report.problems);

    let records = journal::replay(dir.path()).expect("replay");
    assert_eq!(records.len(), 5);
    let lines = read_lines(dir.path());
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.seq, index as u64 + 1);
        assert_eq!(record.line, index as u64 + 1);
        assert_eq!(record.event, call_event(index + 1));
        assert_eq!(record.hash, appended[index].hash);
        assert_eq!(record.hash, sha256_hex(lines[index].as_bytes()));
        assert_eq!(record.time, appended[index].time);
        assert!(journal::parse_rfc3339(&record.time).is_some());
        let expected_prev = if index == 0 {
            "0".repeat(64)
        } else {
            appended[index - 1].hash.clone()
        };
        assert_eq!(record.prev, expected_prev);
    }
    // The documented line format, byte for byte.
    assert!(
        lines[0].starts_with("{\"seq\":1,\"time\":\""),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains(&format!(
        "\"prev\":\"{}\",\"event\":{{\"args\":",
        "0".repeat(64)
    )));

    // Reopening continues the chain.
    let mut journal = Journal::open(dir.path()).expect("reopen");
    let sixth = journal
        .append(&json!({"kind": "shutdown"}))
        .expect("append");
    assert_eq!(sixth.seq, 6);
    drop(journal);
    let records = journal::replay(dir.path()).expect("replay");
    assert_eq!(records[5].prev, appended[4].hash);
    assert!(journal::verify(dir.path()).unwrap().is_intact());
}

#[test]
fn edited_args_are_named_as_bad_hmac() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    assert!(lines[2].contains("svc3.service"));
    lines[2] = lines[2].replace("svc3.service", "sshd.service");
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::BadHmac, 3, Some(3))
    );
    assert!(
        problem.to_string().starts_with("line 3 (seq 3):"),
        "{problem}"
    );

    let error = journal::replay(dir.path()).expect_err("replay must refuse");
    assert!(error.to_string().contains("line 3 (seq 3)"), "{error}");
    let error = Journal::open(dir.path())
        .err()
        .expect("open must refuse a tampered journal");
    assert!(matches!(error, JournalError::Integrity { .. }), "{error}");
}

#[test]
fn reformatted_record_is_named_as_not_canonical() {
    let dir = state_dir();
    append_calls(dir.path(), 3);
    let mut lines = read_lines(dir.path());
    lines[1] = lines[1].replacen("\"verb\":", "\"verb\": ", 1);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::NotCanonical, 2, Some(2))
    );
}

#[test]
fn deleted_record_is_named_as_missing_seq() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    lines.remove(2);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::MissingSeq, 3, Some(3))
    );
    assert!(problem.message.contains("seq 3 is missing"), "{problem}");

    // Two consecutive deletions are one gap.
    lines.remove(1);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::MissingSeq, 2, Some(2))
    );
    assert!(problem.message.contains("seq 2 to 3"), "{problem}");
}

#[test]
fn swapped_records_are_named_as_reordered() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    lines.swap(1, 2);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::DuplicateOrOutOfOrder, 3, Some(2))
    );
    assert!(problem.message.contains("reordered"), "{problem}");
    assert!(problem.message.contains("seq 3 (line 2)"), "{problem}");
}

#[test]
fn duplicated_record_is_named() {
    let dir = state_dir();
    append_calls(dir.path(), 4);
    let mut lines = read_lines(dir.path());
    let copy = lines[1].clone();
    lines.push(copy);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::DuplicateOrOutOfOrder, 5, Some(2))
    );
    assert!(problem.message.contains("line 2"), "{problem}");
}

#[test]
fn inserted_forged_record_is_named_as_bad_hmac() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    // A forger who knows the format but not the key: correct seq, time and chain, HMAC made
    // with a key of their own.
    let body = format!(
        "{{\"seq\":3,\"time\":\"2026-11-30T08:00:00.000Z\",\"prev\":\"{}\",\"event\":{}}}",
        sha256_hex(lines[1].as_bytes()),
        json!({"kind": "call", "verb": "drop_database", "decision": "approved"})
    );
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&[7u8; 32]).unwrap();
    mac.update(body.as_bytes());
    let tag: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let forged = format!("{},\"hmac\":\"{tag}\"}}", &body[..body.len() - 1]);
    lines.insert(2, forged);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::BadHmac, 3, Some(3))
    );
}

#[test]
fn garbage_line_is_named_as_bad_json() {
    let dir = state_dir();
    append_calls(dir.path(), 3);
    let mut lines = read_lines(dir.path());
    lines.insert(1, "not json at all".to_owned());
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::BadJson, 2, None)
    );
    // A complete (newline-terminated) but broken last line is not a torn tail: open refuses.
    let mut lines = read_lines(dir.path());
    lines.remove(1);
    lines.push("{\"seq\":4,".to_owned());
    write_lines(dir.path(), &lines);
    let error = Journal::open(dir.path()).err().expect("open must refuse");
    assert!(error.to_string().contains("line 4"), "{error}");
}

#[test]
fn torn_tail_is_reported_then_repaired_and_journaled_at_open() {
    let dir = state_dir();
    append_calls(dir.path(), 3);
    let torn = b"{\"seq\":4,\"time\":\"2026-11-30T08:1";
    let mut bytes = fs::read(journal_path(dir.path())).unwrap();
    let good_length = bytes.len();
    bytes.extend_from_slice(torn);
    fs::write(journal_path(dir.path()), &bytes).unwrap();

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::TornTail, 4, None)
    );
    assert!(journal::replay(dir.path()).is_err());
    assert!(journal::tail(dir.path(), 2).is_err());

    let mut journal = Journal::open(dir.path()).expect("open repairs a torn tail");
    let records = journal::replay(dir.path()).expect("replay after repair");
    assert_eq!(records.len(), 4);
    let repair = &records[3].event;
    assert_eq!(repair["kind"], "journal_tail_repaired");
    assert_eq!(repair["line"], 4);
    assert_eq!(repair["bytes"], torn.len());
    assert_eq!(repair["sha256"], sha256_hex(torn));
    assert_eq!(records[3].line, 4);
    assert!(fs::read(journal_path(dir.path())).unwrap()[..good_length] == bytes[..good_length]);
    assert_eq!(journal.append(&json!({"kind": "after"})).unwrap().seq, 5);
    drop(journal);
    assert!(journal::verify(dir.path()).unwrap().is_intact());
}

#[test]
fn key_and_journal_are_private_and_weak_permissions_refused() {
    let dir = state_dir();
    append_calls(dir.path(), 1);
    let key_path = dir.path().join(KEY_FILE);
    let key = fs::metadata(&key_path).unwrap();
    assert_eq!(key.mode() & 0o7777, 0o600);
    assert_eq!(key.len(), 32);
    assert_eq!(
        fs::metadata(journal_path(dir.path())).unwrap().mode() & 0o7777,
        0o600
    );
    let first_key = fs::read(&key_path).unwrap();
    assert_ne!(first_key, vec![0u8; 32]);
    append_calls(dir.path(), 1);
    assert_eq!(
        fs::read(&key_path).unwrap(),
        first_key,
        "an existing key is never replaced"
    );

    fs::set_permissions(&key_path, fs::Permissions::from_mode(0o644)).unwrap();
    let error = Journal::open(dir.path()).err().expect("0644 key refused");
    let message = error.to_string();
    assert!(matches!(error, JournalError::Key { .. }), "{message}");
    assert!(
        message.contains("mode 644") && message.contains("chmod 600"),
        "{message}"
    );
    assert!(journal::verify(dir.path()).is_err());
    fs::set_permissions(&key_path, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Journal::open(dir.path()).is_ok());

    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&key_path, Some(54321), None).unwrap();
        let error = Journal::open(dir.path())
            .err()
            .expect("foreign key refused");
        assert!(error.to_string().contains("owned by uid 54321"), "{error}");
        std::os::unix::fs::chown(&key_path, Some(0), None).unwrap();
    }

    // Records without their key are not silently re-keyed.
    fs::remove_file(&key_path).unwrap();
    let error = Journal::open(dir.path())
        .err()
        .expect("missing key with records refused");
    assert!(error.to_string().contains("is missing"), "{error}");
}

#[test]
fn group_writable_state_dir_is_refused() {
    let dir = state_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let error = Journal::open(dir.path()).err().expect("refused");
    assert!(error.to_string().contains("chmod 700"), "{error}");
}

#[test]
fn second_writer_is_refused_and_outside_appends_stop_the_daemon() {
    let dir = state_dir();
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&call_event(1)).unwrap();
    assert!(matches!(
        Journal::open(dir.path()),
        Err(JournalError::Locked { .. })
    ));
    assert!(matches!(
        journal.append(&json!(["not", "an", "object"])),
        Err(JournalError::NotAnObject)
    ));

    let mut lines = read_lines(dir.path());
    lines.push(lines[0].clone());
    write_lines(dir.path(), &lines);
    let error = journal
        .append(&call_event(2))
        .expect_err("refuses to chain onto unknown bytes");
    assert!(
        matches!(error, JournalError::ModifiedExternally { .. }),
        "{error}"
    );
}

#[test]
fn checkpoints_keep_open_fast_and_catch_truncation() {
    let dir = state_dir();
    let total = CHECKPOINT_INTERVAL as usize + 20;
    append_calls(dir.path(), total);
    let checkpoint = fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).expect("checkpoint");
    assert!(
        checkpoint.contains(&format!("\"seq\":{}", CHECKPOINT_INTERVAL)),
        "{checkpoint}"
    );

    // Reopening checkpoints the end; an edit before the checkpoint is then left to `verify`
    // (open only checks the tail), which names it.
    drop(Journal::open(dir.path()).unwrap());
    let checkpoint = fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap();
    assert!(
        checkpoint.contains(&format!("\"seq\":{total}")),
        "{checkpoint}"
    );
    let mut lines = read_lines(dir.path());
    lines[9] = lines[9].replace("svc10.service", "svc99.service");
    write_lines(dir.path(), &lines);
    assert!(
        Journal::open(dir.path()).is_ok(),
        "open verifies only since the checkpoint"
    );
    let problem = only_problem(dir.path());
    assert_eq!((problem.kind, problem.line), (ProblemKind::BadHmac, 10));

    // Cutting records off the end is caught by the checkpoint, at open and by verify.
    lines[9] = lines[9].replace("svc99.service", "svc10.service");
    lines.truncate(total - 2);
    write_lines(dir.path(), &lines);
    let error = Journal::open(dir.path())
        .err()
        .expect("open refuses a truncated journal");
    assert!(
        error.to_string().contains("records were removed"),
        "{error}"
    );
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.seq),
        (ProblemKind::Truncated, Some(total as u64))
    );

    // A forged checkpoint is refused.
    fs::write(
        dir.path().join(CHECKPOINT_FILE),
        checkpoint.replace(&format!("\"seq\":{total}"), "\"seq\":5"),
    )
    .unwrap();
    let error = Journal::open(dir.path())
        .err()
        .expect("forged checkpoint refused");
    assert!(error.to_string().contains("HMAC"), "{error}");
}

#[test]
fn tail_returns_verified_last_records_and_formatting_escapes_control_chars() {
    let dir = state_dir();
    let mut journal = Journal::open(dir.path()).unwrap();
    for index in 1..=4 {
        journal.append(&call_event(index)).unwrap();
    }
    let hostile =
        "x\n2026-11-30T08:17:43.123Z #99 call verb=drop decision=approved\u{1b}[2J\r\u{202e}";
    journal
        .append(&json!({"kind": "call", "verb": "echo", "args": {"text": hostile}, "decision": "denied"}))
        .unwrap();
    drop(journal);

    let records = journal::tail(dir.path(), 2).expect("tail");
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [4, 5]);
    assert_eq!(journal::tail(dir.path(), 50).unwrap().len(), 5);

    let normal = journal::format_record(&records[0]);
    assert!(
        normal.contains(" #4 call caller=alice(1000)/pid:4242 verb=restart"),
        "{normal}"
    );
    assert!(
        normal.contains("args={unit=svc4.service} decision=allowed exit_code=0"),
        "{normal}"
    );

    let shown = journal::format_record(&records[1]);
    assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
    assert!(!shown.contains('\u{202e}'), "{shown:?}");
    assert!(
        shown.contains("\\n2026") && shown.contains("\\u{1b}[2J") && shown.contains("\\r"),
        "{shown}"
    );
    assert!(
        shown.contains("text=\"x\\n"),
        "hostile value is quoted: {shown}"
    );
    assert!(shown.ends_with("decision=denied"), "{shown}");
}

/// A tiny tmpfs mounted for one test, unmounted on drop.
struct Tmpfs {
    mount_point: TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (root only). Under CI=true a missing precondition fails the
    /// test; elsewhere it is skipped loudly.
    fn mount(size: &str) -> Option<Tmpfs> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but not root: the ENOSPC test needs root to mount a tmpfs"
            );
            eprintln!("!!! SKIPPED: ENOSPC journal test needs root to mount a tmpfs !!!");
            return None;
        }
        let mount_point = tempfile::tempdir().expect("tempdir");
        let status = Command::new("/bin/mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(mount_point.path())
            .status()
            .expect("run /bin/mount");
        assert!(status.success(), "mount tmpfs failed: {status}");
        Some(Tmpfs { mount_point })
    }

    fn path(&self) -> &Path {
        self.mount_point.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("/bin/umount")
            .arg(self.mount_point.path())
            .status();
    }
}

#[test]
fn enospc_rolls_back_and_appends_resume_when_space_returns() {
    let Some(tmpfs) = Tmpfs::mount("64k") else {
        return;
    };
    let dir = tmpfs.path().join("state");
    let mut journal = Journal::open(&dir).expect("open on tmpfs");
    for index in 1..=3 {
        journal.append(&call_event(index)).unwrap();
    }
    let filler = tmpfs.path().join("filler");
    fs::write(&filler, vec![b'f'; 24 * 1024]).expect("filler");

    let padding = "p".repeat(1500);
    let mut written = 3u64;
    let error = loop {
        match journal.append(&json!({"kind": "call", "args": {"padding": padding}})) {
            Ok(appended) => {
                written += 1;
                assert_eq!(appended.seq, written);
                assert!(written < 100, "a 64k tmpfs never filled up");
            }
            Err(error) => break error,
        }
    };
    assert!(matches!(error, JournalError::Write { .. }), "{error}");
    assert_eq!(
        error.io_error().and_then(|e| e.raw_os_error()),
        Some(libc::ENOSPC),
        "{error}"
    );
    assert!(error.to_string().contains("rolled back"), "{error}");

    // The file holds only complete records and the chain is intact while still full.
    let report = journal::verify(&dir).unwrap();
    assert_eq!(report.records, written);
    assert!(report.is_intact(), "{:#?}", report.problems);
    assert!(
        journal
            .append(&json!({"kind": "call", "args": {"padding": padding}}))
            .is_err()
    );
    assert!(journal::verify(&dir).unwrap().is_intact());

    fs::remove_file(&filler).unwrap();
    let resumed = journal
        .append(&json!({"kind": "call", "args": {"padding": padding}}))
        .unwrap();
    assert_eq!(resumed.seq, written + 1);
    drop(journal);
    let report = journal::verify(&dir).unwrap();
    assert_eq!(report.records, written + 1);
    assert!(report.is_intact(), "{:#?}", report.problems);
    let records = journal::replay(&dir).unwrap();
    assert_eq!(records.last().unwrap().hash, resumed.hash);
    eprintln!(
        "ENOSPC after {written} records; append resumed as seq {}",
        resumed.seq
    );
}

/// Reports (does not assert) how fast appends and a full replay are on this disk.
#[test]
fn append_and_replay_speed_report() {
    let dir = state_dir();
    let mut journal = Journal::open(dir.path()).unwrap();
    let count = 300;
    let started = Instant::now();
    for index in 1..=count {
        journal.append(&call_event(index)).unwrap();
    }
    let per_append = started.elapsed() / count as u32;
    drop(journal);
    let started = Instant::now();
    let records = journal::replay(dir.path()).unwrap();
    let replay = started.elapsed();
    assert_eq!(records.len(), count);
    eprintln!(
        "journal speed: append (with fdatasync) {per_append:?} each; full verified replay of \
         {count} records {replay:?} ({:?} per record)",
        replay / count as u32
    );
}

#[test]
fn readers_ignore_a_partial_line_while_the_daemon_holds_the_journal() {
    let dir = state_dir();
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&call_event(1)).unwrap();
    // What a reader sees mid-write: the start of a line, no newline yet.
    let mut bytes = fs::read(journal_path(dir.path())).unwrap();
    bytes.extend_from_slice(b"{\"seq\":2,");
    fs::write(journal_path(dir.path()), &bytes).unwrap();
    let report = journal::verify(dir.path()).unwrap();
    assert_eq!(report.records, 1);
    assert!(report.is_intact(), "{:#?}", report.problems);
    assert_eq!(journal::tail(dir.path(), 5).unwrap().len(), 1);
    // Once no daemon holds it, the same bytes are a torn tail.
    drop(journal);
    assert_eq!(only_problem(dir.path()).kind, ProblemKind::TornTail);
}
