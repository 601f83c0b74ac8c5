//! Forward-secure sealing, truncation evidence, segments, snapshots and export, on real files.
//! The attacker here holds what an intruder who takes the host at time t holds: the state
//! directory with the live sealing key (`journal.sealkey`), and write access to the journal.
use crate::common::digest::{hex, hmac};
use crate::common::skip;
use crate::hostile;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use verbd::journal::{
    self, CHECKPOINT_FILE, GAP_ACK_FILE, JOURNAL_FILE, Journal, JournalConfig, JournalError,
    ProblemKind, SEAL_INIT_FILE, SEAL_STATE_FILE, VerifyKey, VerifyOptions, VerifyReport,
    WITNESS_FILE,
};

fn evolve(key: &[u8; 32], epoch: u64) -> [u8; 32] {
    hmac(key, &[b"verbd/journal/v2/evolve", &epoch.to_be_bytes()])
}

fn event(index: usize) -> Value {
    json!({"kind": "exec", "verb": "restart", "caller": {"uid": 1000}, "decision": "run",
           "args": {"unit": format!("svc{index}.service")}})
}

/// A state directory with keys from `setup-keys` (3 records per epoch) and `count` records.
fn sealed_journal(count: usize) -> (TempDir, VerifyKey) {
    let dir = tempfile::tempdir().unwrap();
    let made = journal::setup_keys(dir.path(), None, 3, 900).expect("setup-keys");
    let key = VerifyKey::parse(&made.verify_key.display()).unwrap();
    let mut journal = Journal::open(dir.path()).expect("open");
    for index in 1..=count {
        journal.append(&event(index)).unwrap();
    }
    (dir, key)
}

fn lines(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join(JOURNAL_FILE))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(dir: &Path, lines: &[String]) {
    fs::write(dir.join(JOURNAL_FILE), lines.join("\n") + "\n").unwrap();
}

fn verify_with(dir: &Path, keys: Vec<VerifyKey>) -> VerifyReport {
    journal::verify(&VerifyOptions {
        verify_keys: keys,
        ..VerifyOptions::for_state_dir(dir)
    })
    .unwrap()
}

fn key_again(key: &VerifyKey) -> VerifyKey {
    VerifyKey::parse(&key.display()).unwrap()
}

/// What an intruder reads from the state directory: the live key and its epoch.
fn steal_live_key(dir: &Path) -> ([u8; 32], u64) {
    let bytes = fs::read(dir.join(SEAL_STATE_FILE)).unwrap();
    assert_eq!(bytes.len(), 256);
    let slot = bytes
        .chunks(128)
        .filter(|slot| slot.iter().any(|b| *b != 0))
        .max_by_key(|slot| u64::from_le_bytes(slot[81..89].try_into().unwrap()))
        .expect("a live key");
    let mut key = [0u8; 32];
    key.copy_from_slice(&slot[32..64]);
    (key, u64::from_le_bytes(slot[24..32].try_into().unwrap()))
}

/// Re-MACs `line` (a v2 record) with the key of `epoch` derived from `key`, setting its epoch.
fn remac(line: &str, key: &[u8; 32], epoch: u64) -> String {
    let mut value: Value = serde_json::from_str(line).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("mac");
    object.insert("epoch".into(), epoch.into());
    let body = format!(
        "{{\"seq\":{},\"time\":{},\"prev\":{},\"epoch\":{epoch},\"event\":{}}}",
        object["seq"],
        object["time"],
        object["prev"],
        canonical(&object["event"])
    );
    let mac_key = hmac(key, &[b"verbd/journal/v2/mac"]);
    format!(
        "{},\"mac\":\"{}\"}}",
        &body[..body.len() - 1],
        hex(&hmac(&mac_key, &[body.as_bytes()]))
    )
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn problems_of(report: &VerifyReport) -> String {
    report.problems.iter().map(|p| format!("{p}\n")).collect()
}

#[test]
fn the_live_key_cannot_rewrite_what_was_sealed_before() {
    let (dir, key) = sealed_journal(12);
    // A restart seals the open epoch. Positive control: everything verifies and is proven.
    drop(Journal::open(dir.path()).unwrap());
    let clean = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(clean.is_intact(), "{}", problems_of(&clean));
    assert_eq!(clean.sealing.unproven, 0, "{clean:#?}");
    assert!(clean.sealing.proven_with_verify_key >= 12, "{clean:#?}");
    let original = lines(dir.path());
    let (live, live_epoch) = steal_live_key(dir.path());
    // Record seq 3 (line 3) is the first of the caller's, in epoch 1, sealed long before.
    assert!(original[2].contains("svc1.service"), "{}", original[2]);
    assert!(live_epoch >= 3, "epochs evolved: {live_epoch}");

    let attacks: Vec<(&str, Vec<String>, u64)> = vec![
        (
            "rewrite, re-MAC'd with the live key under the record's own epoch",
            {
                let mut forged = original.clone();
                let edited = forged[2].replace("svc1.service", "evil.service");
                let epoch = serde_json::from_str::<Value>(&edited).unwrap()["epoch"]
                    .as_u64()
                    .unwrap();
                forged[2] = remac(&edited, &live, epoch);
                forged
            },
            3,
        ),
        (
            "rewrite, re-keyed into the live epoch (CVE-2023-31439 style)",
            {
                let mut forged = original.clone();
                forged[2] = remac(
                    &forged[2].replace("svc1.service", "evil.service"),
                    &live,
                    live_epoch,
                );
                forged
            },
            3,
        ),
        (
            "delete a sealed record",
            {
                let mut forged = original.clone();
                forged.remove(2);
                forged
            },
            3,
        ),
        (
            "reorder two sealed records",
            {
                let mut forged = original.clone();
                forged.swap(2, 3);
                forged
            },
            3,
        ),
        (
            "insert a record MAC'd with the live key",
            {
                let mut forged = original.clone();
                let extra = remac(
                    &forged[2].replace("svc1.service", "evil.service"),
                    &live,
                    live_epoch,
                );
                forged.insert(3, extra);
                forged
            },
            3,
        ),
    ];
    for (name, forged, seq) in attacks {
        write_lines(dir.path(), &forged);
        let report = verify_with(dir.path(), vec![key_again(&key)]);
        eprintln!("attack: {name}\n{}", problems_of(&report));
        assert!(!report.is_intact(), "{name}: verify --verify-key passed");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.seq == Some(seq) || p.seq == Some(seq + 1)),
            "{name}: no finding names seq {seq}:\n{}",
            problems_of(&report)
        );
    }
    write_lines(dir.path(), &original);
    assert!(verify_with(dir.path(), vec![key_again(&key)]).is_intact());
}

/// Cuts the last record of the epoch before the live one together with its seal, then renumbers
/// and re-chains everything after it with the stolen live key, and seals the live epoch as if it
/// had begun where the cut epoch did. Every MAC, every seq and the chain are valid again, and the
/// only seal is well-formed: what remains is a record in the live epoch where the earlier epoch
/// was still open. "A record may only carry the epoch open at its place" must name it.
#[test]
fn cutting_a_sealed_epochs_tail_with_its_seal_is_named_where_the_live_epoch_begins() {
    let (dir, key) = sealed_journal(12);
    let original = lines(dir.path());
    let (live, live_epoch) = steal_live_key(dir.path());
    let value = |line: &str| serde_json::from_str::<Value>(line).unwrap();
    let seal = original
        .iter()
        .position(|line| {
            let record = value(line);
            record["event"]["kind"] == "journal_seal" && record["epoch"] == live_epoch - 1
        })
        .expect("the seal of the epoch before the live one");
    let cut = value(&original[seal - 1]);
    assert_eq!(cut["epoch"], live_epoch - 1, "{cut}");
    let cut_seq = cut["seq"].as_u64().unwrap();
    let first_of_cut_epoch = value(&original[seal])["event"]["first_seq"]
        .as_u64()
        .unwrap();
    assert!(
        original[seal + 1..]
            .iter()
            .all(|line| value(line)["epoch"] == live_epoch),
        "everything after the seal is in the live epoch"
    );
    let mut forged: Vec<String> = original[..seal - 1].to_vec();
    let rechain = |mut record: Value, seq: u64, forged: &mut Vec<String>| {
        record["seq"] = seq.into();
        record["prev"] = hex(&Sha256::digest(forged.last().unwrap().as_bytes())).into();
        forged.push(remac(&record.to_string(), &live, live_epoch));
    };
    for line in &original[seal + 1..] {
        let record = value(line);
        let seq = record["seq"].as_u64().unwrap() - 2;
        rechain(record, seq, &mut forged);
    }
    let last = value(forged.last().unwrap());
    let seal_seq = last["seq"].as_u64().unwrap() + 1;
    let mut own_seal = value(&original[seal]);
    own_seal["time"] = last["time"].clone();
    own_seal["event"]["epoch"] = live_epoch.into();
    own_seal["event"]["first_seq"] = first_of_cut_epoch.into();
    own_seal["event"]["records"] = (seal_seq - first_of_cut_epoch + 1).into();
    rechain(own_seal, seal_seq, &mut forged);
    write_lines(dir.path(), &forged);

    let report = journal::verify(&VerifyOptions {
        witness: Some(dir.path().join("no-witness")),
        verify_keys: vec![key_again(&key)],
        ..VerifyOptions::for_state_dir(dir.path())
    })
    .unwrap();
    eprintln!("{}", problems_of(&report));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::EpochOrder && p.seq == Some(cut_seq)),
        "no EpochOrder finding at seq {cut_seq}, where the live epoch now begins:\n{}",
        problems_of(&report)
    );
    assert!(!report.is_intact());
}

#[test]
fn a_wrong_or_missing_key_is_never_a_pass_and_says_what_it_cannot_prove() {
    let (dir, _key) = sealed_journal(5);
    let other = VerifyKey::parse(
        &journal::setup_keys(tempfile::tempdir().unwrap().path(), None, 3, 900)
            .unwrap()
            .verify_key
            .display(),
    )
    .unwrap();
    let wrong = verify_with(dir.path(), vec![other]);
    assert!(!wrong.is_intact());
    assert!(
        wrong
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::NotProven),
        "{}",
        problems_of(&wrong)
    );
    let without = verify_with(dir.path(), Vec::new());
    assert!(without.is_intact(), "{}", problems_of(&without));
    assert!(
        without
            .not_proven
            .iter()
            .any(|s| s.contains("--verify-key") && s.contains("not given")),
        "{:#?}",
        without.not_proven
    );
}

#[test]
fn an_epoch_left_open_is_a_finding_with_the_key_and_sealed_at_the_next_start() {
    let (dir, key) = sealed_journal(4);
    // Four records with three per epoch: the last epoch is open (the daemon "crashed").
    let report = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Unsealed),
        "{}",
        problems_of(&report)
    );
    drop(Journal::open(dir.path()).unwrap());
    let report = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    // Stripping the last seal leaves its epoch unsealed: named, never a pass.
    let mut all = lines(dir.path());
    let last = all.pop().unwrap();
    assert!(last.contains("journal_seal"), "{last}");
    write_lines(dir.path(), &all);
    let report = journal::verify(&VerifyOptions {
        witness: Some(dir.path().join("no-witness")),
        verify_keys: vec![key_again(&key)],
        ..VerifyOptions::for_state_dir(dir.path())
    })
    .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Unsealed),
        "{}",
        problems_of(&report)
    );
}

#[test]
fn evolved_keys_are_erased_from_the_state_directory() {
    let (dir, key) = sealed_journal(10);
    assert!(
        !dir.path().join(SEAL_INIT_FILE).exists(),
        "the init file was consumed"
    );
    let k0: [u8; 32] = {
        let digits: String = key.display()[4..].replace('-', "");
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    };
    let (live, live_epoch) = steal_live_key(dir.path());
    let mut keys = vec![k0];
    for epoch in 0..live_epoch {
        let next = evolve(keys.last().unwrap(), epoch);
        keys.push(next);
    }
    assert_eq!(
        keys.last().unwrap(),
        &live,
        "the schedule is K(e+1)=HMAC(K(e), …)"
    );
    let mut files = Vec::new();
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            files.push((path.clone(), fs::read(&path).unwrap()));
        }
    }
    let contains =
        |haystack: &[u8], needle: &[u8]| haystack.windows(needle.len()).any(|w| w == needle);
    for (epoch, old) in keys[..keys.len() - 1].iter().enumerate() {
        for (path, bytes) in &files {
            assert!(
                !contains(bytes, old) && !contains(bytes, hex(old).as_bytes()),
                "key of epoch {epoch} is still in {}",
                path.display()
            );
        }
    }
    let state = fs::read(dir.path().join(SEAL_STATE_FILE)).unwrap();
    assert!(
        contains(&state, &live),
        "positive control: the live key is in the state file"
    );
    eprintln!(
        "checked {} files for {} erased keys; live key at epoch {live_epoch}",
        files.len(),
        keys.len() - 1
    );
}

fn copy_dir(from: &Path) -> TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    to
}

#[test]
fn cutting_one_to_five_tail_records_is_named_by_verify_and_refused_at_start() {
    let (dir, _key) = sealed_journal(12);
    let all = lines(dir.path());
    let total = all.len() as u64;
    for cut in 1..=5u64 {
        let copy = copy_dir(dir.path());
        write_lines(copy.path(), &all[..all.len() - cut as usize]);
        let report = verify_with(copy.path(), Vec::new());
        let truncated: Vec<_> = report
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::Truncated)
            .collect();
        assert_eq!(truncated.len(), 1, "cut {cut}: {}", problems_of(&report));
        let range = if cut == 1 {
            format!("record seq {total} is missing")
        } else {
            format!("records seq {} to {total} are missing", total - cut + 1)
        };
        assert!(truncated[0].message.contains(&range), "{}", truncated[0]);
        let error = Journal::open(copy.path()).err().expect("start refuses");
        match &error {
            JournalError::MissingRecords { from, to, .. } => {
                assert_eq!((*from, *to), (total - cut + 1, total), "{error}");
            }
            other => panic!("cut {cut}: {other}"),
        }
        eprintln!(
            "cut {cut}: verify: {}\n        start: {error}",
            truncated[0]
        );
    }
}

#[test]
fn an_older_copy_of_the_journal_put_back_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = Journal::open(dir.path()).unwrap();
    for index in 1..=5 {
        journal.append(&event(index)).unwrap();
    }
    drop(journal);
    // The intruder's "backup": everything the daemon user can read and write.
    let old = copy_dir(dir.path());
    let mut journal = Journal::open(dir.path()).unwrap();
    for index in 6..=9 {
        journal.append(&event(index)).unwrap();
    }
    drop(journal);
    for name in [JOURNAL_FILE, CHECKPOINT_FILE, SEAL_STATE_FILE] {
        fs::copy(old.path().join(name), dir.path().join(name)).unwrap();
    }
    let report = verify_with(dir.path(), Vec::new());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::Truncated),
        "{}",
        problems_of(&report)
    );
    assert!(matches!(
        Journal::open(dir.path()),
        Err(JournalError::MissingRecords { .. })
    ));
}

#[test]
fn an_acknowledged_gap_is_journaled_and_the_journal_goes_on() {
    if !nix::unistd::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "needs root under CI"
        );
        skip::announce("SKIPPED: acknowledging a gap needs a root-owned acknowledgement");
        return;
    }
    let (dir, key) = sealed_journal(6);
    let all = lines(dir.path());
    write_lines(dir.path(), &all[..all.len() - 2]);
    let range = journal::acknowledge_gap(dir.path(), "disk restored from backup; ticket 42")
        .unwrap()
        .expect("a gap");
    assert_eq!(
        range,
        journal::Acknowledged::MissingRecords {
            from: all.len() as u64 - 1,
            to: all.len() as u64
        }
    );
    let mut journal = Journal::open(dir.path()).expect("serves after the acknowledgement");
    journal.append(&event(99)).unwrap();
    journal.seal_now("stop").unwrap();
    drop(journal);
    assert!(!dir.path().join(GAP_ACK_FILE).exists());
    let after = lines(dir.path());
    let ack: Value = serde_json::from_str(&after[all.len() - 2]).unwrap();
    assert_eq!(ack["event"]["kind"], "journal_gap_acknowledged");
    assert_eq!(ack["seq"], all.len() as u64 + 1);
    assert_eq!(ack["event"]["by_uid"], 0);
    let report = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert_eq!(report.acknowledged.len(), 1, "{report:#?}");
    assert!(report.acknowledged[0].contains("ticket 42"));
    // The daemon's own uid cannot excuse its deletions.
    let (dir, _) = sealed_journal(4);
    let all = lines(dir.path());
    write_lines(dir.path(), &all[..all.len() - 1]);
    journal::acknowledge_gap(dir.path(), "x").unwrap();
    std::os::unix::fs::chown(dir.path().join(GAP_ACK_FILE), Some(61000), None).unwrap();
    let error = Journal::open(dir.path()).err().expect("refused");
    assert!(
        error.to_string().contains("only root may acknowledge"),
        "{error}"
    );
}

/// The daemon's uid can unlink the root-owned witness (the state directory is its own): the
/// intruder's best move is to cut the tail and delete the witness with it. The next start must
/// refuse until root acknowledges the loss, not warn and serve.
#[test]
fn a_deleted_witness_stops_the_next_start_until_root_acknowledges() {
    if !nix::unistd::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "needs root under CI"
        );
        skip::announce("SKIPPED: acknowledging a lost witness needs a root-owned acknowledgement");
        return;
    }
    let (dir, key) = sealed_journal(8);
    let all = lines(dir.path());
    write_lines(dir.path(), &all[..all.len() - 3]);
    fs::remove_file(dir.path().join(WITNESS_FILE)).unwrap();
    let kept_last = all.len() as u64 - 3;

    let report = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(
        report
            .not_proven
            .iter()
            .any(|line| line.contains("records cut off the end cannot be detected")),
        "{:#?}",
        report.not_proven
    );
    for attempt in 1..=2 {
        // The first refused start re-creates the witness empty: the second must refuse too.
        match Journal::open(dir.path()) {
            Err(JournalError::WitnessLost { end, ref hash, .. }) => {
                assert_eq!(end, kept_last, "attempt {attempt}");
                let last: Value = serde_json::from_str(&all[kept_last as usize - 1]).unwrap();
                let line_hash = hex(&Sha256::digest(all[kept_last as usize - 1].as_bytes()));
                assert_eq!(hash, &line_hash, "attempt {attempt}: {last}");
            }
            Err(other) => panic!("attempt {attempt}: {other}"),
            Ok(_) => panic!("attempt {attempt}: served with the witness gone"),
        }
    }
    let error = Journal::open(dir.path()).err().unwrap().to_string();
    assert!(error.contains("verbd audit acknowledge-gap"), "{error}");

    // The daemon's own uid cannot excuse it.
    let acknowledged = journal::acknowledge_gap(dir.path(), "witness lost; ticket 7").unwrap();
    assert_eq!(
        acknowledged,
        Some(journal::Acknowledged::WitnessLost { last: kept_last })
    );
    std::os::unix::fs::chown(dir.path().join(GAP_ACK_FILE), Some(61000), None).unwrap();
    let error = Journal::open(dir.path()).err().expect("refused");
    assert!(
        error.to_string().contains("only root may acknowledge"),
        "{error}"
    );
    fs::remove_file(dir.path().join(GAP_ACK_FILE)).unwrap();

    // An acknowledgement for another end does not count: cut one more record after it.
    journal::acknowledge_gap(dir.path(), "witness lost; ticket 7").unwrap();
    let now = lines(dir.path());
    write_lines(dir.path(), &now[..now.len() - 1]);
    assert!(matches!(
        Journal::open(dir.path()),
        Err(JournalError::WitnessLost { .. })
    ));
    write_lines(dir.path(), &now);

    let mut journal = Journal::open(dir.path()).expect("serves after root acknowledged");
    journal.append(&event(99)).unwrap();
    journal.seal_now("stop").unwrap();
    drop(journal);
    assert!(!dir.path().join(GAP_ACK_FILE).exists());
    let after = lines(dir.path());
    let ack: Value = serde_json::from_str(&after[kept_last as usize]).unwrap();
    assert_eq!(ack["event"]["kind"], "journal_witness_lost_acknowledged");
    assert_eq!(ack["event"]["last_seq"], kept_last);
    assert_eq!(ack["event"]["by_uid"], 0);
    assert_eq!(ack["seq"], kept_last + 1);
    let report = verify_with(dir.path(), vec![key_again(&key)]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    let witness = report.witness.expect("a witness");
    assert!(witness.heads > 0, "heads are published again: {witness:?}");
    // From here on a cut tail is named again.
    let after = lines(dir.path());
    write_lines(dir.path(), &after[..after.len() - 1]);
    assert!(matches!(
        Journal::open(dir.path()),
        Err(JournalError::MissingRecords { .. })
    ));
}

#[test]
fn segments_rotate_with_the_chain_and_verify_covers_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = || JournalConfig {
        segment_bytes: 4096,
        ..JournalConfig::new(dir.path())
    };
    let mut journal = Journal::open_with(config()).unwrap();
    for index in 1..=60 {
        journal.append(&event(index)).unwrap();
    }
    let stats = journal.stats();
    drop(journal);
    let archives: Vec<PathBuf> = {
        let mut found: Vec<PathBuf> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("journal-")
            })
            .collect();
        found.sort();
        found
    };
    assert!(archives.len() >= 3, "{archives:?}");
    assert_eq!(stats.segments, archives.len() as u64 + 1);
    let on_disk: u64 = archives
        .iter()
        .chain([&dir.path().join(JOURNAL_FILE)])
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(stats.bytes, on_disk);
    assert!(stats.bytes_last_minute > 0 && stats.appended_records >= 60);
    let report = verify_with(dir.path(), Vec::new());
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert_eq!(report.segments, archives.len() as u64 + 1);
    let records = journal::replay(dir.path()).unwrap().into_records().unwrap();
    assert_eq!(records.len(), 60);
    assert!(records.windows(2).all(|w| w[0].seq < w[1].seq));
    // Every closed segment ends with a seal and the next begins with its header.
    let second = fs::read_to_string(&archives[1]).unwrap();
    assert!(
        second
            .lines()
            .next()
            .unwrap()
            .contains("\"kind\":\"journal_segment\",\"segment\":2")
    );
    assert!(
        second
            .lines()
            .last()
            .unwrap()
            .contains("\"reason\":\"rotation\"")
    );
    // Restart continues in the live segment.
    let mut journal = Journal::open_with(config()).unwrap();
    journal.append(&event(61)).unwrap();
    drop(journal);
    // A whole closed segment deleted: named.
    fs::remove_file(&archives[1]).unwrap();
    let report = verify_with(dir.path(), Vec::new());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::MissingSegment
                && p.message.contains("segment 2 is missing")),
        "{}",
        problems_of(&report)
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::MissingSeq)
    );
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Counter {
    seen: u64,
}

#[test]
fn replay_starts_from_the_latest_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let config = || JournalConfig {
        snapshot_bytes: 4096,
        ..JournalConfig::new(dir.path())
    };
    let mut journal = Journal::open_with(config()).unwrap();
    for index in 1..=40 {
        journal.append(&event(index)).unwrap();
        if journal.snapshot_due() {
            journal
                .write_snapshot(&Counter { seen: index as u64 })
                .unwrap();
        }
    }
    drop(journal);
    let journal = Journal::open_with(config()).unwrap();
    let mut replay = journal.replay::<Counter>().unwrap();
    let snapshot = replay.snapshot.take().expect("a snapshot");
    let after: Vec<_> = replay.by_ref().collect();
    replay.finish().unwrap();
    assert!(snapshot.state.seen > 0 && snapshot.state.seen < 40);
    assert_eq!(snapshot.state.seen + after.len() as u64, 40, "{snapshot:?}");
    assert!(after.iter().all(|r| r.seq > snapshot.seq));
    assert_eq!(
        journal.replay_all().unwrap().into_records().unwrap().len(),
        40
    );
}

#[test]
fn an_export_verifies_offline_with_the_key() {
    let (dir, key) = sealed_journal(9);
    drop(Journal::open(dir.path()).unwrap());
    let out = tempfile::tempdir().unwrap();
    let whole = out.path().join("all.jsonl");
    let mut file = fs::File::create(&whole).unwrap();
    let summary = journal::export(dir.path(), 1, &mut file, &whole).unwrap();
    assert_eq!(summary.first_seq, Some(1));
    let check = |path: &Path, keys: Vec<VerifyKey>| {
        journal::verify(&VerifyOptions {
            state_dir: None,
            file: Some(path.to_owned()),
            verify_keys: keys,
            witness: None,
        })
        .unwrap()
    };
    let report = check(&whole, vec![key_again(&key)]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert!(report.sealing.proven_with_verify_key >= 9);
    // From the middle: still proven, and it says where it begins.
    let part = out.path().join("part.jsonl");
    let mut file = fs::File::create(&part).unwrap();
    journal::export(dir.path(), 6, &mut file, &part).unwrap();
    let report = check(&part, vec![key_again(&key)]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert!(
        report
            .not_proven
            .iter()
            .any(|s| s.contains("begins at seq 6"))
    );
    // An edited copy fails.
    let text = fs::read_to_string(&whole)
        .unwrap()
        .replacen("svc2.service", "svc9.service", 1);
    fs::write(&whole, text).unwrap();
    let report = check(&whole, vec![key_again(&key)]);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::BadHmac),
        "{}",
        problems_of(&report)
    );
}

#[test]
fn the_initial_key_can_come_from_a_systemd_credential() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = tempfile::tempdir().unwrap();
    let made = journal::setup_keys(
        dir.path(),
        Some(&credentials.path().join(journal::CREDENTIAL_NAME)),
        4,
        900,
    )
    .unwrap();
    assert!(!dir.path().join(SEAL_INIT_FILE).exists());
    let key = VerifyKey::parse(&made.verify_key.display()).unwrap();
    let config = || JournalConfig {
        credentials_dir: Some(credentials.path().to_owned()),
        ..JournalConfig::new(dir.path())
    };
    let mut journal = Journal::open_with(config()).unwrap();
    assert_eq!(journal.stats().key_custody, "credential");
    journal.append(&event(1)).unwrap();
    drop(journal);
    // A restart with the credential still there continues the same generation.
    let mut journal = Journal::open_with(config()).unwrap();
    journal.append(&event(2)).unwrap();
    journal.seal_now("stop").unwrap();
    drop(journal);
    let all = lines(dir.path());
    assert_eq!(all.iter().filter(|l| l.contains("journal_keys")).count(), 1);
    assert!(all[0].contains("\"custody\":\"credential\""));
    assert!(
        !dir.path().join(journal::KEY_FILE).exists(),
        "no local key is kept"
    );
    let report = verify_with(dir.path(), vec![key]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert_eq!(report.sealing.unproven, 0);
}

#[test]
fn setup_keys_on_a_running_journal_starts_a_new_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&event(1)).unwrap();
    drop(journal);
    let made = journal::setup_keys(dir.path(), None, 1000, 900).unwrap();
    let key = VerifyKey::parse(&made.verify_key.display()).unwrap();
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&event(2)).unwrap();
    journal.seal_now("stop").unwrap();
    drop(journal);
    let report = verify_with(dir.path(), vec![key]);
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert_eq!(report.sealing.generations.len(), 2, "{report:#?}");
    assert_eq!(report.sealing.generations[1].1, "setup-keys");
    assert!(report.sealing.proven_with_local_key > 0);
    assert!(report.sealing.proven_with_verify_key > 0);
}

/// A state directory holding a v1 journal (before epochs and the witness) of three records,
/// HMAC'd with `journal.key`; returns it and the hash of its last line.
fn v1_state_dir() -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let key = [5u8; 32];
    fs::write(dir.path().join(journal::KEY_FILE), key).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut fs::metadata(dir.path().join(journal::KEY_FILE))
            .unwrap()
            .permissions(),
        0o600,
    );
    fs::set_permissions(
        dir.path().join(journal::KEY_FILE),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut prev = "0".repeat(64);
    let mut text = String::new();
    for seq in 1..=3u64 {
        let body = format!(
            "{{\"seq\":{seq},\"time\":\"2026-11-30T08:00:0{seq}.000Z\",\"prev\":\"{prev}\",\"event\":{{\"kind\":\"old\",\"n\":{seq}}}}}"
        );
        let line = format!(
            "{},\"hmac\":\"{}\"}}",
            &body[..body.len() - 1],
            hex(&hmac(&key, &[body.as_bytes()]))
        );
        prev = hex(&Sha256::digest(line.as_bytes()));
        text.push_str(&line);
        text.push('\n');
    }
    fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
    std::fs::set_permissions(
        dir.path().join(JOURNAL_FILE),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    (dir, prev)
}

#[test]
fn a_v1_journal_is_verified_and_continued_as_segment_1() {
    let (dir, prev) = v1_state_dir();
    let mut journal = Journal::open(dir.path()).expect("migrates");
    journal.append(&event(4)).unwrap();
    drop(journal);
    assert!(dir.path().join("journal-000001.jsonl").exists());
    let first_new = lines(dir.path())[0].clone();
    assert!(
        first_new.contains("\"seq\":4,") && first_new.contains(&prev),
        "{first_new}"
    );
    let report = verify_with(dir.path(), Vec::new());
    assert!(report.is_intact(), "{}", problems_of(&report));
    assert_eq!(report.sealing.legacy_verified, 3);
    let records = journal::replay(dir.path()).unwrap().into_records().unwrap();
    assert_eq!(
        records.iter().filter(|r| r.event["kind"] == "old").count(),
        3
    );
    // An edit inside the old segment is still named.
    let archive = dir.path().join("journal-000001.jsonl");
    let old = fs::read_to_string(&archive)
        .unwrap()
        .replace("\"n\":2", "\"n\":7");
    fs::write(&archive, old).unwrap();
    let report = verify_with(dir.path(), Vec::new());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::BadHmac && p.seq == Some(2))
    );
}

#[test]
fn heads_are_published_to_journald_as_structured_entries() {
    let dir = tempfile::tempdir().unwrap();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket_path = socket_dir.path().join("journal.socket");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut journal = Journal::open_with(JournalConfig {
        journald_socket: Some(socket_path.clone()),
        ..JournalConfig::new(dir.path())
    })
    .unwrap();
    let appended = journal.append(&event(7)).unwrap();
    let mut entry = None;
    let mut buffer = vec![0u8; 65536];
    for _ in 0..10 {
        let size = socket.recv(&mut buffer).unwrap();
        let text = String::from_utf8_lossy(&buffer[..size]).into_owned();
        if text.contains(&format!("VERBD_SEQ={}\n", appended.seq)) {
            entry = Some(text);
            break;
        }
    }
    let entry = entry.expect("an entry for the record");
    for field in [
        "SYSLOG_IDENTIFIER=verbd\n".to_owned(),
        format!("VERBD_CHAIN={}\n", appended.hash),
        "VERBD_EVENT=exec\n".to_owned(),
        "VERBD_VERB=restart\n".to_owned(),
        "VERBD_CALLER_UID=1000\n".to_owned(),
        "VERBD_DECISION=run\n".to_owned(),
        format!("MESSAGE_ID={}\n", journal::message_id("exec")),
        "VERBD_EPOCH=1\n".to_owned(),
    ] {
        assert!(entry.contains(&field), "{field:?} missing from {entry:?}");
    }
    assert!(entry.starts_with("MESSAGE="), "{entry}");
}

#[test]
fn the_witness_is_append_only_when_the_host_says_so() {
    if !nix::unistd::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "needs root under CI"
        );
        skip::announce("SKIPPED: chattr +a needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    drop(Journal::open(dir.path()).unwrap());
    let witness = dir.path().join(WITNESS_FILE);
    let status = Command::new("chattr")
        .arg("+a")
        .arg(&witness)
        .status()
        .unwrap();
    assert!(status.success(), "chattr +a failed on this file system");
    struct Unset(PathBuf);
    impl Drop for Unset {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-a").arg(&self.0).status();
        }
    }
    let _unset = Unset(witness.clone());
    let mut journal = Journal::open(dir.path()).unwrap();
    journal.append(&event(1)).unwrap();
    assert_eq!(
        journal.stats().witness,
        journal::WitnessProtection::AppendOnly
    );
    drop(journal);
    // Even root without clearing the flag cannot shorten it.
    let error = fs::OpenOptions::new()
        .write(true)
        .open(&witness)
        .and_then(|f| f.set_len(0))
        .expect_err("append-only");
    eprintln!("truncating the append-only witness: {error}");
    let report = verify_with(dir.path(), Vec::new());
    assert_eq!(
        report.witness.unwrap().protection,
        journal::WitnessProtection::AppendOnly
    );
}

/// The witness is opened by root before the drop: a hard link planted under its name (to a
/// file root owns elsewhere) must be refused, not appended to.
#[test]
fn a_hard_link_planted_as_the_witness_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("not-the-witness");
    fs::write(&elsewhere, b"someone else's file\n").unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    fs::hard_link(&elsewhere, state.join(WITNESS_FILE)).unwrap();
    let error = Journal::open(&state).err().expect("refused");
    assert!(error.to_string().contains("2 hard links"), "{error}");
    assert_eq!(
        fs::read(&elsewhere).unwrap(),
        b"someone else's file\n",
        "nothing was appended"
    );
    // Positive control: the same directory without the link opens.
    fs::remove_file(state.join(WITNESS_FILE)).unwrap();
    Journal::open(&state).expect("opens");
}

/// `acknowledge-gap` runs as root in the daemon user's directory: a hard link planted under
/// the acknowledgement's name must not make root overwrite the file it points to.
#[test]
fn acknowledge_gap_never_writes_through_a_planted_hard_link() {
    let (dir, _key) = sealed_journal(4);
    let all = lines(dir.path());
    write_lines(dir.path(), &all[..all.len() - 1]);
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("roots-file");
    fs::write(&elsewhere, b"root's file\n").unwrap();
    if fs::hard_link(&elsewhere, dir.path().join(GAP_ACK_FILE)).is_err() {
        // Another file system: the link cannot exist, nor the attack.
        skip::announce("SKIPPED: the temp dirs are on different file systems");
        return;
    }
    journal::acknowledge_gap(dir.path(), "ticket 9")
        .unwrap()
        .expect("a gap");
    assert_eq!(fs::read(&elsewhere).unwrap(), b"root's file\n");
    assert_eq!(fs::metadata(&elsewhere).unwrap().nlink(), 1);
    let ack = fs::read_to_string(dir.path().join(GAP_ACK_FILE)).unwrap();
    assert!(ack.contains("ticket 9"), "{ack}");
}

/// The daemon's uid holds `journal.key`, so it can write a v1 journal, which starts without
/// witness heads legitimately. Cutting the tail, rewriting the journal as v1 and deleting the
/// witness must not get past a witness that protects against that uid: a daemon that dropped
/// from root to an unprivileged uid, with the root-owned witness opened before the drop, refuses.
#[test]
fn a_journal_rewritten_as_v1_does_not_excuse_a_deleted_witness() {
    if !nix::unistd::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "needs root under CI"
        );
        skip::announce("SKIPPED: a root-owned witness and a dropped uid need root");
        return;
    }
    const DAEMON: u32 = 61077;
    let (dir, _) = v1_state_dir();
    // As `serve` does: root opens the witness (it is created, empty and root's), then gives
    // the state directory to the daemon user and drops to it.
    let witness = journal::Witness::open(dir.path()).unwrap();
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path.ends_with(WITNESS_FILE) {
            std::os::unix::fs::chown(&path, Some(DAEMON), Some(DAEMON)).unwrap();
        }
    }
    std::os::unix::fs::chown(dir.path(), Some(DAEMON), Some(DAEMON)).unwrap();
    let state = dir.path().to_owned();
    let (pid, mut answer) = hostile::fork_as(DAEMON, move |mut out| {
        let mut config = JournalConfig::new(&state);
        config.witness = Some(witness);
        let said = match Journal::open_with(config) {
            Err(JournalError::WitnessLost { end: 3, .. }) => "refused".to_owned(),
            Err(other) => format!("other error: {other}"),
            Ok(_) => "served".to_owned(),
        };
        let _ = std::io::Write::write_all(&mut out, said.as_bytes());
    });
    let mut said = String::new();
    std::io::Read::read_to_string(&mut answer, &mut said).unwrap();
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(said, "refused");
}
