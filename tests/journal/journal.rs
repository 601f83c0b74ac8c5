//! Journal integration tests on real files: tampering of every kind is detected and named, torn
//! tails and ENOSPC (a real tiny tmpfs) leave the chain intact, permissions are enforced; and the
//! forward-secure part: an intruder holding the live sealing key cannot rewrite sealed history,
//! cut the tail, or put an old journal back without `verify` and the next start naming it.
use crate::common::digest::{hex, hmac, sha256_hex};
use crate::common::skip;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};
use tempfile::TempDir;
use verbd::journal::{
    self, CHECKPOINT_FILE, JOURNAL_FILE, Journal, JournalError, KEY_FILE, Problem, ProblemKind,
    VerifyOptions,
};

/// A fresh journal opens with two records of its own: `journal_keys` (seq 1) and the seal of
/// epoch 0 (seq 2). The caller's records follow.
const GENESIS: usize = 2;

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

fn report(dir: &Path) -> journal::VerifyReport {
    journal::verify(&VerifyOptions::for_state_dir(dir)).expect("verify runs")
}

fn problems(dir: &Path) -> Vec<Problem> {
    report(dir).problems
}

/// The caller's records, streamed back and verified.
fn replay(dir: &Path) -> Result<Vec<journal::Record>, JournalError> {
    journal::replay(dir)?.into_records()
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

fn hmac_hex(key: &[u8], body: &[u8]) -> String {
    hex(&hmac(key, &[body]))
}

#[test]
fn append_then_verify_and_replay() {
    let dir = state_dir();
    let appended = append_calls(dir.path(), 5);
    assert_eq!(
        appended.iter().map(|a| a.seq).collect::<Vec<_>>(),
        [3, 4, 5, 6, 7]
    );

    let verified = report(dir.path());
    assert_eq!(verified.records, 7);
    assert!(verified.is_intact(), "{:#?}", verified.problems);

    let records = replay(dir.path()).expect("replay");
    assert_eq!(records.len(), 5);
    let lines = read_lines(dir.path());
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.seq, (GENESIS + index) as u64 + 1);
        assert_eq!(record.line, (GENESIS + index) as u64 + 1);
        assert_eq!(record.epoch, Some(1));
        assert_eq!(record.event, call_event(index + 1));
        assert_eq!(record.hash, appended[index].hash);
        assert_eq!(record.hash, sha256_hex(lines[GENESIS + index].as_bytes()));
        assert_eq!(record.time, appended[index].time);
        assert!(journal::parse_rfc3339(&record.time).is_some());
        assert_eq!(
            record.prev,
            sha256_hex(lines[GENESIS + index - 1].as_bytes())
        );
    }
    // The documented line format, byte for byte; seq 1 chains to all zeros.
    assert!(
        lines[0].starts_with("{\"seq\":1,\"time\":\""),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains(&format!(
        "\"prev\":\"{}\",\"epoch\":0,\"event\":{{\"custody\":\"local\",",
        "0".repeat(64)
    )));
    assert!(
        lines[2].contains(",\"epoch\":1,\"event\":{\"args\":"),
        "{}",
        lines[2]
    );
    assert!(lines[2].contains("\"},\"mac\":\""), "{}", lines[2]);

    // Reopening seals the epoch the last run left open, then continues the chain.
    let mut journal = Journal::open(dir.path()).expect("reopen");
    let next = journal
        .append(&json!({"kind": "shutdown"}))
        .expect("append");
    assert_eq!(next.seq, 9);
    drop(journal);
    let lines = read_lines(dir.path());
    assert!(
        lines[7].contains("\"kind\":\"journal_seal\",\"reason\":\"start\""),
        "{}",
        lines[7]
    );
    let records = replay(dir.path()).expect("replay");
    assert_eq!(records[5].prev, sha256_hex(lines[7].as_bytes()));
    assert!(report(dir.path()).is_intact());
}

#[test]
fn edited_args_are_named_as_bad_hmac() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    assert!(lines[4].contains("svc3.service"));
    lines[4] = lines[4].replace("svc3.service", "sshd.service");
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::BadHmac, 5, Some(5))
    );
    assert!(
        problem.to_string().starts_with("line 5 (seq 5):"),
        "{problem}"
    );

    let error = replay(dir.path()).expect_err("replay must refuse");
    assert!(error.to_string().contains("line 5 (seq 5)"), "{error}");
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
    lines[3] = lines[3].replacen("\"verb\":", "\"verb\": ", 1);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::NotCanonical, 4, Some(4))
    );
}

#[test]
fn deleted_record_is_named_as_missing_seq() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    lines.remove(4);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::MissingSeq, 5, Some(5))
    );
    assert!(problem.message.contains("seq 5 is missing"), "{problem}");

    // Two consecutive deletions are one gap.
    lines.remove(3);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::MissingSeq, 4, Some(4))
    );
    assert!(problem.message.contains("seq 4 to 5"), "{problem}");
}

#[test]
fn swapped_records_are_named_as_reordered() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    lines.swap(3, 4);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::DuplicateOrOutOfOrder, 5, Some(4))
    );
    assert!(problem.message.contains("reordered"), "{problem}");
    assert!(problem.message.contains("seq 5 (line 4)"), "{problem}");
}

#[test]
fn duplicated_record_is_named() {
    let dir = state_dir();
    append_calls(dir.path(), 4);
    let mut lines = read_lines(dir.path());
    let copy = lines[3].clone();
    lines.push(copy);
    write_lines(dir.path(), &lines);
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::DuplicateOrOutOfOrder, 7, Some(4))
    );
    assert!(problem.message.contains("line 4"), "{problem}");
}

#[test]
fn inserted_forged_record_is_named_as_bad_hmac() {
    let dir = state_dir();
    append_calls(dir.path(), 5);
    let mut lines = read_lines(dir.path());
    // A forger who knows the format but not the key: correct seq, time, epoch and chain, MAC
    // made with a key of their own.
    let body = format!(
        "{{\"seq\":5,\"time\":\"2026-11-30T08:00:00.000Z\",\"prev\":\"{}\",\"epoch\":1,\"event\":{}}}",
        sha256_hex(lines[3].as_bytes()),
        json!({"kind": "call", "verb": "drop_database", "decision": "approved"})
    );
    let forged = format!(
        "{},\"mac\":\"{}\"}}",
        &body[..body.len() - 1],
        hmac_hex(&[7u8; 32], body.as_bytes())
    );
    lines.insert(4, forged);
    write_lines(dir.path(), &lines);

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::BadHmac, 5, Some(5))
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
    lines.push("{\"seq\":6,".to_owned());
    write_lines(dir.path(), &lines);
    let error = Journal::open(dir.path()).err().expect("open must refuse");
    assert!(error.to_string().contains("line 6"), "{error}");
}

#[test]
fn torn_tail_is_reported_then_repaired_and_journaled_at_open() {
    let dir = state_dir();
    append_calls(dir.path(), 3);
    let torn = b"{\"seq\":6,\"time\":\"2026-11-30T08:1";
    let mut bytes = fs::read(journal_path(dir.path())).unwrap();
    let good_length = bytes.len();
    bytes.extend_from_slice(torn);
    fs::write(journal_path(dir.path()), &bytes).unwrap();

    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.line, problem.seq),
        (ProblemKind::TornTail, 6, None)
    );
    assert!(replay(dir.path()).is_err());
    assert!(journal::tail(dir.path(), 2).is_err());

    let mut journal = Journal::open(dir.path()).expect("open repairs a torn tail");
    assert!(fs::read(journal_path(dir.path())).unwrap()[..good_length] == bytes[..good_length]);
    // The start seals the epoch the crashed run left open (seq 6), then journals the repair.
    let records = journal::tail(dir.path(), 1).expect("tail after repair");
    let repair = &records[0].event;
    assert_eq!(repair["kind"], "journal_tail_repaired");
    assert_eq!(repair["line"], 6);
    assert_eq!(repair["bytes"], torn.len());
    assert_eq!(repair["sha256"], sha256_hex(torn));
    assert_eq!((records[0].seq, records[0].line), (7, 7));
    assert_eq!(journal.append(&json!({"kind": "after"})).unwrap().seq, 8);
    drop(journal);
    assert!(report(dir.path()).is_intact());
    assert_eq!(replay(dir.path()).unwrap().len(), 4);
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
    assert!(journal::verify(&VerifyOptions::for_state_dir(dir.path())).is_err());
    fs::set_permissions(&key_path, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Journal::open(dir.path()).is_ok());

    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&key_path, Some(54321), None).unwrap();
        let error = Journal::open(dir.path())
            .err()
            .expect("foreign key refused");
        assert!(error.to_string().contains("owned by uid 54321"), "{error}");
        std::os::unix::fs::chown(&key_path, Some(0), None).unwrap();
    } else {
        skip::skip_or_fail(
            "key_and_journal_are_private (foreign-owner half)",
            "chown to another uid needs root",
        );
    }

    // Without journal.key the generation is not re-keyed: the daemon continues it with its
    // sealing state, and verify says plainly it can no longer prove those records.
    fs::remove_file(&key_path).unwrap();
    let mut journal = Journal::open(dir.path()).expect("continues with the sealing state");
    journal.append(&call_event(3)).unwrap();
    drop(journal);
    let lines = read_lines(dir.path());
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"kind\":\"journal_keys\""))
            .count(),
        1,
        "no new key generation"
    );
    let verified = report(dir.path());
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    assert!(verified.sealing.unproven > 0, "{verified:#?}");
    assert!(
        verified
            .not_proven
            .iter()
            .any(|s| s.contains("--verify-key")),
        "{:#?}",
        verified.not_proven
    );
    // And if the sealing state is gone too, the generation cannot go on: refused, with the fix.
    fs::remove_file(dir.path().join(journal::SEAL_STATE_FILE)).unwrap();
    let error = Journal::open(dir.path()).err().expect("refused");
    assert!(error.to_string().contains("setup-keys"), "{error}");
}

#[test]
fn group_writable_state_dir_is_refused() {
    // Group-writable only, world-writable only, and both: each refused on its own.
    for mode in [0o770, 0o707, 0o777] {
        let dir = state_dir();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode)).unwrap();
        let error = Journal::open(dir.path()).err().expect("refused");
        assert!(error.to_string().contains("chmod 700"), "{mode:o}: {error}");
    }
    // Control: the private mode opens.
    let dir = state_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    assert!(Journal::open(dir.path()).is_ok());
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
fn open_checks_from_the_last_seal_and_the_witness_catches_truncation() {
    let dir = state_dir();
    let total = journal::DEFAULT_EPOCH_RECORDS as usize + 20;
    append_calls(dir.path(), total);
    // The 1000-record epoch was sealed on the way; the checkpoint names that seal.
    let checkpoint = fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).expect("checkpoint");
    let sealed_at = GENESIS + journal::DEFAULT_EPOCH_RECORDS as usize + 1;
    assert!(
        checkpoint.contains(&format!("\"seq\":{sealed_at}")),
        "{checkpoint}"
    );

    // Reopening seals the open epoch and moves the checkpoint there; an edit before it is then
    // left to `verify` (open only checks since the last seal), which names it.
    drop(Journal::open(dir.path()).unwrap());
    let end = GENESIS + total + 2;
    let checkpoint = fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap();
    assert!(
        checkpoint.contains(&format!("\"seq\":{end}")),
        "{checkpoint}"
    );
    let mut lines = read_lines(dir.path());
    assert_eq!(lines.len(), end);
    lines[11] = lines[11].replace("svc10.service", "svc99.service");
    write_lines(dir.path(), &lines);
    assert!(
        Journal::open(dir.path()).is_ok(),
        "open verifies only since the last seal"
    );
    let problem = only_problem(dir.path());
    assert_eq!((problem.kind, problem.line), (ProblemKind::BadHmac, 12));

    // Cutting records off the end is caught through the witness, at open and by verify,
    // naming the missing records.
    let lines = read_lines(dir.path());
    let mut original = lines.clone();
    original[11] = original[11].replace("svc99.service", "svc10.service");
    let total_now = original.len();
    let mut cut = original.clone();
    cut.truncate(total_now - 2);
    write_lines(dir.path(), &cut);
    let error = Journal::open(dir.path())
        .err()
        .expect("open refuses a truncated journal");
    assert!(
        matches!(error, JournalError::MissingRecords { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains(&format!(
            "missing records seq {} to {}",
            total_now - 1,
            total_now
        )),
        "{error}"
    );
    let problem = only_problem(dir.path());
    assert_eq!(
        (problem.kind, problem.seq),
        (ProblemKind::Truncated, Some(total_now as u64 - 1))
    );

    // A checkpoint that no longer matches is only a hint: open checks from the beginning.
    write_lines(dir.path(), &original);
    fs::write(
        dir.path().join(CHECKPOINT_FILE),
        checkpoint.replace(&format!("\"seq\":{end}"), "\"seq\":5"),
    )
    .unwrap();
    drop(Journal::open(dir.path()).expect("a forged checkpoint costs a full check, no more"));
    assert!(report(dir.path()).is_intact());
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
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [6, 7]);
    assert_eq!(journal::tail(dir.path(), 50).unwrap().len(), GENESIS + 5);

    let normal = journal::format_record(&records[0]);
    assert!(
        normal.contains(" #6 call caller=alice(1000)/pid:4242 verb=restart"),
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
            skip::announce("SKIPPED: ENOSPC journal test needs root to mount a tmpfs");
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
    let mut written = GENESIS as u64 + 3;
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
    // The journal's own append or the witness after it: either way ENOSPC, and a failed
    // journal write was rolled back.
    assert!(
        matches!(
            error,
            JournalError::Write { .. } | JournalError::Witness { .. }
        ),
        "{error}"
    );
    assert_eq!(
        error.io_error().and_then(|e| e.raw_os_error()),
        Some(libc::ENOSPC),
        "{error}"
    );
    if matches!(error, JournalError::Write { .. }) {
        assert!(error.to_string().contains("rolled back"), "{error}");
    }

    // The file holds only complete records and the chain is intact while still full.
    let verified = report(&dir);
    assert_eq!(verified.records, written);
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    assert!(
        journal
            .append(&json!({"kind": "call", "args": {"padding": padding}}))
            .is_err()
    );
    assert!(report(&dir).is_intact());

    fs::remove_file(&filler).unwrap();
    let resumed = journal
        .append(&json!({"kind": "call", "args": {"padding": padding}}))
        .unwrap();
    assert_eq!(resumed.seq, written + 1);
    drop(journal);
    let verified = report(&dir);
    assert_eq!(verified.records, written + 1);
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    assert_eq!(
        verified.witness.as_ref().unwrap().last_published_seq,
        Some(written + 1)
    );
    let records = replay(&dir).unwrap();
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
    let records = replay(dir.path()).unwrap();
    let replayed = started.elapsed();
    assert_eq!(records.len(), count);
    eprintln!(
        "journal speed: append (with fdatasync) {per_append:?} each; full verified replay of \
         {count} records {replayed:?} ({:?} per record)",
        replayed / count as u32
    );
}

#[test]
fn readers_ignore_a_partial_line_while_the_daemon_holds_the_journal() {
    let dir = state_dir();
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&call_event(1)).unwrap();
    // What a reader sees mid-write: the start of a line, no newline yet.
    let mut bytes = fs::read(journal_path(dir.path())).unwrap();
    bytes.extend_from_slice(b"{\"seq\":4,");
    fs::write(journal_path(dir.path()), &bytes).unwrap();
    let verified = report(dir.path());
    assert_eq!(verified.records, 3);
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    assert_eq!(journal::tail(dir.path(), 5).unwrap().len(), 3);
    // Once no daemon holds it, the same bytes are a torn tail.
    drop(journal);
    assert_eq!(only_problem(dir.path()).kind, ProblemKind::TornTail);
}

/// Group commit: concurrent appenders share fdatasyncs, yet each returns only after its own
/// record is durable and applied, records are applied in journal order, and the chain verifies.
#[test]
fn group_commit_shares_fdatasyncs_and_answers_only_durable_records() {
    use std::sync::{Arc, Mutex};
    let dir = state_dir();
    let applied = Arc::new(Mutex::new(Vec::<u64>::new()));
    let seen = applied.clone();
    let group = Arc::new(journal::GroupCommit::new(
        Journal::open(dir.path()).unwrap(),
        move |_event: &Value, appended: &journal::Appended| {
            seen.lock().unwrap().push(appended.seq);
        },
    ));
    let syncs_before = group.lock().unwrap().stats().record_syncs;

    // Hold the journal while eight appenders queue up: they must be committed together.
    let held = group.lock().unwrap();
    let appenders: Vec<_> = (0..8)
        .map(|index| {
            let (group, applied) = (group.clone(), applied.clone());
            std::thread::spawn(move || {
                let appended = group.append(call_event(index)).unwrap();
                // Answered only once durable and applied (applying follows the fdatasync).
                assert!(applied.lock().unwrap().contains(&appended.seq));
                appended.seq
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(held);
    let mut seqs: Vec<u64> = appenders.into_iter().map(|t| t.join().unwrap()).collect();
    let syncs = group.lock().unwrap().stats().record_syncs - syncs_before;
    assert!(syncs < 8, "8 queued appenders took {syncs} fdatasyncs");

    // Then 32 appenders at once, 20 records each.
    let appenders: Vec<_> = (0..32)
        .map(|thread| {
            let (group, applied) = (group.clone(), applied.clone());
            std::thread::spawn(move || {
                (0..20)
                    .map(|index| {
                        let appended = group.append(call_event(thread * 100 + index)).unwrap();
                        assert!(applied.lock().unwrap().contains(&appended.seq));
                        appended.seq
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for appender in appenders {
        seqs.extend(appender.join().unwrap());
    }
    let stats = group.lock().unwrap().stats();
    eprintln!(
        "{} records in {} fdatasyncs",
        stats.appended_records, stats.record_syncs
    );
    seqs.sort_unstable();
    let expected: Vec<u64> = (GENESIS as u64 + 1..=GENESIS as u64 + 648).collect();
    assert_eq!(seqs, expected, "every appender got its own, contiguous seq");
    let applied = applied.lock().unwrap().clone();
    assert_eq!(applied, expected, "applied once each, in journal order");
    drop(group);
    let verified = report(dir.path());
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    assert_eq!(
        verified.witness.as_ref().unwrap().last_published_seq,
        Some(GENESIS as u64 + 648)
    );
}

/// A group: a record that fails alone fails alone; a group crossing an epoch's end and a
/// segment's end commits what came before the seal and the rotation first, and verifies.
#[test]
fn a_group_keeps_per_record_results_across_seals_and_rotations() {
    let dir = state_dir();
    let mut config = journal::JournalConfig::new(dir.path());
    config.segment_bytes = 64 * 1024;
    let mut journal = Journal::open_with(config).unwrap();
    let too_large = json!({"kind": "call", "args": {"padding": "p".repeat(65 * 1024 * 1024)}});
    let mut events: Vec<Value> = (0..1500).map(call_event).collect();
    events.insert(700, too_large);
    let results = journal.append_group(&events);
    assert_eq!(results.len(), 1501);
    assert!(matches!(results[700], Err(JournalError::TooLarge { .. })));
    let seqs: Vec<u64> = results
        .iter()
        .filter_map(|result| result.as_ref().ok().map(|appended| appended.seq))
        .collect();
    assert_eq!(seqs.len(), 1500);
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]));
    let stats = journal.stats();
    assert!(stats.segments > 1, "the group crossed a segment's end");
    assert!(stats.epoch >= 2, "the group crossed an epoch's end");
    drop(journal);
    let verified = report(dir.path());
    assert!(verified.is_intact(), "{:#?}", verified.problems);
    let records = replay(dir.path()).unwrap();
    let calls: Vec<u64> = records
        .iter()
        .filter(|record| record.event["kind"] == "call")
        .map(|record| record.seq)
        .collect();
    assert_eq!(calls, seqs, "each result names its record");
}
