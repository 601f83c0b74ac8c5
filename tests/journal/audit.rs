//! The audit half of the journal through the real binary: `audit verify` names an edited,
//! deleted, inserted or reordered record; `audit tail` is readable; a journal that cannot be
//! written denies every call (fail closed) and the daemon serves again once space is back.
use crate::common;
use crate::common::digest::hmac;
use common::policy::{Category, Param, Policy, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use verbd::protocol::Response;

/// `echo` for the callers in `me` (root, and whoever else a test adds).
fn policy_for(me: &[u32]) -> String {
    Policy::new()
        .allow_root()
        .agents("me", me)
        .verb(
            "echo",
            Verb::command(Category::ReadOnly, "/bin/echo {w}")
                .description("echo a word")
                .roles(&["me"])
                .param("w", Param::matching("[a-z0-9]+").max_length(200)),
        )
        .render()
}

fn policy() -> String {
    policy_for(&[0])
}

fn journal_with_calls() -> Option<(Daemon, std::path::PathBuf)> {
    if !require_root("audit") {
        return None;
    }
    let mut d = Daemon::start(&policy());
    for w in ["alpha", "beta", "gamma", "delta"] {
        assert_eq!(stdout_of(&d.call("echo", &[("w", w)])), format!("{w}\n"));
    }
    d.stop();
    let state = d.state.clone();
    Some((d, state))
}

fn verify(state: &std::path::Path) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["audit", "verify", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn edit_lines(state: &std::path::Path, f: impl FnOnce(&mut Vec<String>)) {
    let path = state.join("journal.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    f(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

fn line_of(state: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap()
        .lines()
        .position(|l| l.contains(needle))
        .unwrap()
}

#[test]
fn intact_journal_verifies_and_tails_readably() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("intact"), "{out}");
    let tail = Command::new(BIN)
        .args(["audit", "tail", "-n", "3", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&tail.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("delta") || text.contains("result") || text.contains("stop"),
        "{text}"
    );
}

#[test]
fn edited_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"beta\"");
    edit_lines(&state, |l| l[n] = l[n].replace("\"beta\"", "\"bet4\""));
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(out.contains(&format!("line {}", n + 1)), "{out}");
}

#[test]
fn deleted_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"gamma\"");
    edit_lines(&state, |l| {
        l.remove(n);
    });
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(
        out.to_lowercase().contains("missing") || out.contains("gap") || out.contains("deleted"),
        "{out}"
    );
}

#[test]
fn swapped_records_are_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let a = line_of(&state, "\"alpha\"");
    let b = line_of(&state, "\"delta\"");
    edit_lines(&state, |l| l.swap(a, b));
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("line {}", a + 1)) || out.contains(&format!("line {}", b + 1)),
        "{out}"
    );
}

#[test]
fn inserted_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"beta\"");
    edit_lines(&state, |l| {
        let forged = l[n].replace("\"beta\"", "\"evil\"");
        l.insert(n + 1, forged);
    });
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(out.contains(&format!("line {}", n + 2)), "{out}");
}

struct Tmpfs(std::path::PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("/bin/umount").arg(&self.0).status();
    }
}

#[test]
fn full_journal_denies_calls_and_recovers() {
    if !require_root("journal full") {
        return;
    }
    let dir = open_tempdir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let status = Command::new("/bin/mount")
        .args(["-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(status.success(), "mount tmpfs");
    let mount = Tmpfs(state.clone());
    let d = Daemon::spawn_in(dir, &policy(), &[]);
    d.wait_ready();
    // Fill the file system with a ballast file, leaving almost nothing (the journal's own
    // files — segment, witness, sealing key, checkpoint — take a few pages already).
    let ballast = state.join("ballast");
    let mut bytes = Vec::new();
    bytes.resize(64 * 1024, b'x');
    std::fs::write(&ballast, &bytes).unwrap();
    let mut filler = 0;
    while std::fs::write(state.join(format!("fill{filler}")), [b'y'; 512]).is_ok() {
        filler += 1;
        assert!(filler < 1000);
    }
    let long = "a".repeat(150);
    let mut denied = None;
    for _ in 0..50 {
        match d.call("echo", &[("w", &long)]) {
            Response::Ok { .. } => continue,
            // The exec record fit, the result record did not: the verb ran, and says so.
            Response::Error { message } if message.contains("result could not be journaled") => {
                continue;
            }
            Response::Denied { reason } => {
                denied = Some(reason);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let reason = denied.expect("calls kept running with a full journal");
    assert!(reason.contains("journal"), "{reason}");
    // Space is back: the daemon serves again, and the chain is intact.
    std::fs::remove_file(&ballast).unwrap();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "back")])), "back\n");
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    // Stop, unmount, then let the temp dir go (it cannot be removed while mounted).
    let mut d = d;
    d.stop();
    drop(mount);
    drop(d);
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `audit setup-keys` into `state`, returning the verification key it printed.
fn setup_keys(state: &std::path::Path, epoch_records: u32) -> String {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)
        .unwrap();
    let (code, out, err) = cli(&[
        "audit",
        "setup-keys",
        "--state-dir",
        state.to_str().unwrap(),
        "--epoch-records",
        &epoch_records.to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    out.split_whitespace()
        .find(|word| word.starts_with("vk1-"))
        .expect("a verification key is printed")
        .to_owned()
}

/// `verbd audit acknowledge-gap` (it must succeed); returns what it printed.
fn acknowledge_gap(state: &std::path::Path, reason: &str) -> String {
    let (code, out, err) = cli(&[
        "audit",
        "acknowledge-gap",
        "--state-dir",
        state.to_str().unwrap(),
        "--reason",
        reason,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    out
}

fn restart_output(d: &Daemon) -> std::process::Output {
    Command::new(BIN)
        .args(["serve", "--policy"])
        .arg(&d.policy)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--state-dir")
        .arg(&d.state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn cut_tail_records_are_named_by_verify_and_the_restart_refuses_until_acknowledged() {
    let Some((mut d, state)) = journal_with_calls() else {
        return;
    };
    let path = state.join("journal.jsonl");
    let original = std::fs::read_to_string(&path).unwrap();
    let total = original.lines().count();
    for cut in 1..=3 {
        let kept: Vec<&str> = original.lines().take(total - cut).collect();
        std::fs::write(&path, kept.join("\n") + "\n").unwrap();
        let (code, out) = verify(&state);
        assert_eq!(code, 1, "cut {cut}: {out}");
        assert!(out.contains("missing from the end"), "cut {cut}: {out}");
        let restart = restart_output(&d);
        let err = String::from_utf8_lossy(&restart.stderr);
        eprintln!("cut {cut}: verify said:\n{out}\nrestart said:\n{err}");
        assert_eq!(restart.status.code(), Some(78), "{err}");
        let first = total - cut + 1;
        let missing = if cut == 1 {
            format!("missing record seq {total}:")
        } else {
            format!("missing records seq {first} to {total}:")
        };
        assert!(err.contains(&missing), "{err}");
    }
    acknowledge_gap(&state, "test: three records cut");
    d.respawn();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "after")])), "after\n");
    d.stop();
    let ack = d
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "journal_gap_acknowledged")
        .expect("the acknowledgement is journaled");
    assert_eq!(ack["reason"], "test: three records cut");
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ACKNOWLEDGED GAP"), "{out}");
}

/// The intruder with the daemon's uid cuts the tail and unlinks the root-owned witness (the
/// state directory is the daemon's, so it may): the restart refuses, exit 78, until root
/// acknowledges the loss; then the daemon serves and the loss is on record.
#[test]
fn a_deleted_witness_with_a_cut_tail_stops_the_restart_until_acknowledged() {
    let Some((mut d, state)) = journal_with_calls() else {
        return;
    };
    let path = state.join("journal.jsonl");
    let original = std::fs::read_to_string(&path).unwrap();
    let total = original.lines().count();
    let kept: Vec<&str> = original.lines().take(total - 2).collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    std::fs::remove_file(state.join("journal.witness")).unwrap();
    for attempt in 1..=2 {
        let restart = restart_output(&d);
        let err = String::from_utf8_lossy(&restart.stderr);
        assert_eq!(restart.status.code(), Some(78), "attempt {attempt}: {err}");
        assert!(err.contains("holds no heads"), "attempt {attempt}: {err}");
        assert!(err.contains("verbd audit acknowledge-gap"), "{err}");
    }
    let out = acknowledge_gap(&state, "test: witness deleted");
    assert!(out.contains("the witness holds no heads"), "{out}");
    d.respawn();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "after")])), "after\n");
    d.stop();
    let ack = d
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "journal_witness_lost_acknowledged")
        .expect("the acknowledgement is journaled");
    assert_eq!(ack["reason"], "test: witness deleted");
    assert_eq!(ack["last_seq"], (total - 2) as u64);
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn setup_keys_then_verify_key_proves_every_epoch_and_a_wrong_key_fails() {
    if !require_root("setup-keys") {
        return;
    }
    let mut vk = String::new();
    let mut d = Daemon::start_with(&policy(), |dir| vk = setup_keys(&dir.join("state"), 3));
    for w in ["one", "two", "three", "four"] {
        assert_eq!(stdout_of(&d.call("echo", &[("w", w)])), format!("{w}\n"));
    }
    d.stop();
    assert!(!d.state.join("journal.sealkey.init").exists());
    assert!(
        !d.state.join("journal.key").exists(),
        "no local key with set-up keys"
    );
    let state = d.state.to_str().unwrap().to_owned();
    let (code, out, err) = cli(&[
        "audit",
        "verify",
        "--state-dir",
        &state,
        "--verify-key",
        &vk,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("proven with the verification key"), "{out}");
    assert!(
        !out.contains("not given") && !out.contains("not sealed"),
        "{out}"
    );
    // Without the key: intact, and it says what it cannot prove.
    let (code, out, _) = cli(&["audit", "verify", "--state-dir", &state]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("NOT PROVEN") && out.contains("--verify-key"),
        "{out}"
    );
    // Another generation's key proves nothing: a failure, never a pass.
    let other = tempfile::tempdir().unwrap();
    let wrong = setup_keys(&other.path().join("state"), 3);
    let (code, out, err) = cli(&[
        "audit",
        "verify",
        "--state-dir",
        &state,
        "--verify-key",
        &wrong,
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("could not be checked"), "{err}");
    // An exported copy verifies offline with the key.
    let export = d.path("export.jsonl");
    let (code, out, err) = cli(&[
        "audit",
        "export",
        "--state-dir",
        &state,
        "--format",
        "jsonl",
        "--output",
        export.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&[
        "audit",
        "verify",
        "--file",
        export.to_str().unwrap(),
        "--verify-key",
        &vk,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&export)
        .unwrap()
        .replacen("\"one\"", "\"0ne\"", 1);
    std::fs::write(&export, text).unwrap();
    let (code, _, err) = cli(&[
        "audit",
        "verify",
        "--file",
        export.to_str().unwrap(),
        "--verify-key",
        &vk,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("MAC does not match"), "{err}");
}

#[test]
fn a_full_disk_while_sealing_denies_calls_and_loses_nothing() {
    if !require_root("journal full while sealing") {
        return;
    }
    let dir = open_tempdir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let status = Command::new("/bin/mount")
        .args(["-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(status.success(), "mount tmpfs");
    let mount = Tmpfs(state.clone());
    // Two records per epoch: nearly every call crosses an epoch boundary and seals.
    let vk = setup_keys(&state, 2);
    let d = Daemon::spawn_in(dir, &policy(), &[]);
    d.wait_ready();
    let ballast = state.join("ballast");
    std::fs::write(&ballast, vec![b'x'; 64 * 1024]).unwrap();
    let mut filler = 0;
    while std::fs::write(state.join(format!("fill{filler}")), [b'y'; 512]).is_ok() {
        filler += 1;
        assert!(filler < 1000);
    }
    let long = "a".repeat(150);
    let mut ran = 0;
    // Runs whose exec record fit but whose result record did not: the caller is told the verb
    // ran and its result could not be journaled (an unknown outcome), never "nothing ran".
    let mut unrecorded = 0;
    let mut denied = None;
    for _ in 0..200 {
        match d.call("echo", &[("w", &long)]) {
            Response::Ok { .. } => ran += 1,
            Response::Error { message } if message.contains("result could not be journaled") => {
                unrecorded += 1;
            }
            Response::Denied { reason } => {
                denied = Some(reason);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        unrecorded <= 1,
        "after one unrecorded result new calls are denied"
    );
    let reason = denied.expect("calls kept running with a full disk");
    assert!(reason.contains("journal"), "{reason}");
    eprintln!("after {ran} calls on a full disk: {reason}");
    std::fs::remove_file(&ballast).unwrap();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "back")])), "back\n");
    let mut d = d;
    d.stop();
    let state_arg = state.to_str().unwrap().to_owned();
    let (code, out, err) = cli(&[
        "audit",
        "verify",
        "--state-dir",
        &state_arg,
        "--verify-key",
        &vk,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let events = d.journal_events();
    let results = events.iter().filter(|e| e["kind"] == "result").count();
    let execs = events.iter().filter(|e| e["kind"] == "exec").count();
    assert_eq!(
        results,
        ran + 1,
        "every call that answered with its output has its result on record"
    );
    assert_eq!(
        execs,
        ran + 1 + unrecorded,
        "every run is on record, including one whose caller heard it ran unrecorded"
    );
    drop(mount);
    drop(d);
}

#[test]
fn the_witness_stays_roots_after_the_privilege_drop() {
    if !require_root("privilege drop") {
        return;
    }
    // The embedded demo policy: a root-started daemon drops to `nobody`.
    let dir = open_tempdir();
    let state = dir.path().join("state");
    let socket = dir.path().join("s");
    let mut child = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    use std::os::unix::fs::MetadataExt;
    let witness = std::fs::metadata(state.join("journal.witness")).unwrap();
    let journal = std::fs::metadata(state.join("journal.jsonl")).unwrap();
    assert_eq!(witness.uid(), 0, "the witness is root's");
    assert_ne!(journal.uid(), 0, "the journal is the daemon user's");
    // The daemon user cannot open the witness for writing.
    let nobody = journal.uid();
    let attempt = Command::new("/usr/bin/truncate")
        .args(["-s", "0"])
        .arg(state.join("journal.witness"))
        .uid(nobody)
        .gid(journal.gid())
        .output()
        .unwrap();
    assert!(
        !attempt.status.success(),
        "the daemon user truncated the witness"
    );
    eprintln!(
        "daemon user truncating the witness: {}",
        String::from_utf8_lossy(&attempt.stderr).trim()
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("root-owned"), "{out}");
    // Cut the tail: the dropped daemon refuses; root acknowledges; the acknowledgement survives
    // the hand-over of the state directory to the daemon user and is honoured.
    let path = state.join("journal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&path, lines[..lines.len() - 2].join("\n") + "\n").unwrap();
    let serve = |socket: &std::path::Path| {
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(socket)
            .arg("--state-dir")
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let refused = serve(&dir.path().join("s2")).wait_with_output().unwrap();
    assert_eq!(refused.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("missing records"));
    acknowledge_gap(&state, "test");
    let socket = dir.path().join("s3");
    let mut child = serve(&socket);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("daemon exited {status}: {err}");
        }
        assert!(std::time::Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("journal_gap_acknowledged")
    );
}

/// The QR form of the verification key decodes, with an independent decoder (zbarimg), to
/// exactly the key printed as text.
#[test]
fn the_verification_key_qr_code_decodes_to_the_printed_key() {
    let zbarimg = std::path::Path::new("/usr/bin/zbarimg");
    if !zbarimg.exists() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but zbarimg (package zbar-tools) is missing (.ci/run installs it)"
        );
        skip::announce("SKIPPED: zbarimg (zbar-tools) is not installed");
        return;
    }
    let dir = open_tempdir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, out, err) = cli(&[
        "audit",
        "setup-keys",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let key = out
        .split_whitespace()
        .find(|word| word.starts_with("vk1-"))
        .expect("a verification key is printed");
    // The picture: the lines of block characters after the QR heading.
    let after = out
        .split("as a QR code")
        .nth(1)
        .expect("a QR code is printed");
    let rows: Vec<Vec<char>> = after
        .lines()
        .skip_while(|line| !line.contains('█'))
        .take_while(|line| line.contains(['█', '▀', '▄']))
        .map(|line| line.chars().collect())
        .collect();
    assert!(rows.len() > 10, "{after}");
    // Each character is two modules tall: ▀ top dark, ▄ bottom dark, █ both; a quiet zone of
    // light modules around it, then 8 pixels per module, as a PBM image.
    let width = rows.iter().map(Vec::len).max().unwrap();
    let mut modules: Vec<Vec<bool>> = Vec::new();
    for row in &rows {
        let (mut top, mut bottom) = (Vec::new(), Vec::new());
        for column in 0..width {
            let c = row.get(column).copied().unwrap_or(' ');
            top.push(matches!(c, '█' | '▀'));
            bottom.push(matches!(c, '█' | '▄'));
        }
        modules.push(top);
        modules.push(bottom);
    }
    let (scale, margin) = (8usize, 8usize);
    let pixels_wide = (width + 2 * margin) * scale;
    let pixels_high = (modules.len() + 2 * margin) * scale;
    let mut pbm = format!("P1\n{pixels_wide} {pixels_high}\n");
    for y in 0..pixels_high {
        for x in 0..pixels_wide {
            let (my, mx) = (
                (y / scale).checked_sub(margin),
                (x / scale).checked_sub(margin),
            );
            let dark = match (my, mx) {
                (Some(my), Some(mx)) => modules.get(my).and_then(|r| r.get(mx)) == Some(&true),
                _ => false,
            };
            pbm.push_str(if dark { "1 " } else { "0 " });
        }
        pbm.push('\n');
    }
    let image = dir.path().join("key.pbm");
    std::fs::write(&image, pbm).unwrap();
    let decoded = Command::new(zbarimg)
        .args(["--raw", "-q"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(
        decoded.status.success(),
        "zbarimg could not read the QR code: {}",
        String::from_utf8_lossy(&decoded.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&decoded.stdout).trim_end(), key);
}

/// `line` (a record of a journal without set-up keys) MAC'd again with the key of its epoch,
/// derived from `k0` (`journal.key`) as the daemon derives it; the forger's tool.
fn remac_with_local_key(line: &str, k0: &[u8; 32]) -> String {
    let record: serde_json::Value = serde_json::from_str(line).unwrap();
    let epoch = record["epoch"]
        .as_u64()
        .expect("a v2 record names its epoch");
    let mut key = *k0;
    for step in 0..epoch {
        key = hmac(&key, &[b"verbd/journal/v2/evolve", &step.to_be_bytes()]);
    }
    let mac_key = hmac(&key, &[b"verbd/journal/v2/mac"]);
    let body_end = line
        .rfind(",\"mac\":\"")
        .expect("the mac is the last field");
    let body = format!("{}}}", &line[..body_end]);
    let tag: String = hmac(&mac_key, &[body.as_bytes()])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{},\"mac\":\"{tag}\"}}", &line[..body_end])
}

/// The intruder holds the state directory: `journal.key` (this journal has no set-up keys), so
/// every MAC can be forged; the witness is deleted. What is left to catch an edited record is the
/// hash chain: the next record's `prev` is the hash of the original.
#[test]
fn an_edited_record_with_a_forged_mac_and_no_witness_breaks_the_chain() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let k0: [u8; 32] = std::fs::read(state.join("journal.key"))
        .unwrap()
        .try_into()
        .expect("a 32-byte local key");
    let n = line_of(&state, "\"beta\"");
    let original = std::fs::read_to_string(state.join("journal.jsonl")).unwrap();
    let line = original.lines().nth(n).unwrap().to_owned();
    // Control: the forger's MAC is the daemon's own, byte for byte.
    assert_eq!(remac_with_local_key(&line, &k0), line);
    std::fs::remove_file(state.join("journal.witness")).unwrap();
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "unedited, without the witness: {out}");

    let forged = remac_with_local_key(&line.replace("\"beta\"", "\"bet4\""), &k0);
    edit_lines(&state, |l| l[n] = forged);
    let (code, out) = verify(&state);
    assert_eq!(code, 1, "the edit verified: {out}");
    assert!(
        out.contains(&format!("line {}", n + 2)) && out.contains("does not chain"),
        "the next record's chain link is not named: {out}"
    );
    assert!(!out.contains("HMAC") && !out.contains("hmac"), "{out}");
}

const HOSTILE: u32 = 63040;

/// A hostile agent writes text meant to forge a record in a SIEM that reads `audit export
/// --format jsonl`: a verb name and an argument holding a newline, CR, and the characters
/// Python's `splitlines()` and JavaScript treat as line breaks (U+0085, U+2028, U+2029), each
/// followed by a whole fake record. A newline was always escaped by JSON; on the old code the
/// three others were written raw, so a reader splitting on them got the fake record as a line of
/// its own. Now every exported line is one record for every such reader, and the export still
/// verifies.
#[test]
fn agent_text_cannot_forge_a_record_in_the_jsonl_export() {
    if !require_root("agent_text_cannot_forge_a_record_in_the_jsonl_export") {
        return;
    }
    let policy = policy_for(&[0, HOSTILE]);
    let d = Daemon::start(&policy);
    d.open_socket();
    let fake =
        r#"{"seq":1,"time":"2026-01-01T00:00:00.000Z","event":{"kind":"approved","by":{"uid":0}}}"#;
    for separator in [
        "\n", "\r", "\u{85}", "\u{2028}", "\u{2029}", "\u{b}", "\u{1c}",
    ] {
        let forged = format!("echo{separator}{fake}");
        // A verb that does not exist (journaled with its name) and a value the pattern refuses.
        let out = d.cli_as(HOSTILE, &["call", &forged]);
        assert_ne!(out.status.code(), Some(0), "{out:?}");
        let out = d.cli_as(HOSTILE, &["call", "echo", &format!("w={forged}")]);
        assert_ne!(out.status.code(), Some(0), "{out:?}");
    }
    let state = d.state.to_str().unwrap().to_string();
    let export = d.path("hostile-export.jsonl");
    let (code, _, err) = cli(&[
        "audit",
        "export",
        "--state-dir",
        &state,
        "--format",
        "jsonl",
        "--output",
        export.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&export).unwrap();
    let records = text.lines().count();
    assert!(
        text.contains("approved") && records > 10,
        "the hostile text is not in the export"
    );
    // What line readers split on: `\n` (every SIEM), and Python's `str.splitlines()` set.
    let splitters = [
        '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
        '\u{2029}',
    ];
    let pieces: Vec<&str> = text
        .split(|c| splitters.contains(&c))
        .filter(|p| !p.is_empty())
        .collect();
    println!(
        "{records} records; splitlines() reads {} lines; raw separators: {:?}",
        pieces.len(),
        text.chars()
            .filter(|c| *c != '\n' && splitters.contains(c))
            .collect::<Vec<_>>()
    );
    for piece in &pieces {
        let value: serde_json::Value = serde_json::from_str(piece).unwrap_or_else(|e| {
            panic!("a line reader got a piece that is not a record ({e}): {piece:?}")
        });
        assert!(value["mac"].is_string(), "not a journal record: {piece}");
    }
    assert_eq!(pieces.len(), records, "a record was split in two");
    let (code, out, err) = cli(&["audit", "verify", "--file", export.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}
