//! A hostile agent against the journal's size (issue 12, item 3): a real daemon, requests sent by
//! a forked child running as an unprivileged uid.
//!
//! - Bounded fields: refused calls and `check` requests of 0.5 MB carrying long verb names,
//!   parameter names, many parameters, non-string values, long paths and tool names. Each made a
//!   journal record as large as the request, or twice as large (the verb name is repeated in the
//!   refusal's reason), fsync'd. Now every record stays under [`MAX_RECORD_BYTES`] and a cut
//!   value still carries its length and sha256.
use crate::common;
use crate::hostile;

use common::policy::{Category, CommandMode, Param, Policy, Sandbox, Verb};
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use verbd::protocol::{Request, Response};

const AGENT: u32 = 61470;
/// A uid that matches no role.
const STRANGER: u32 = 61471;

/// The most one journal record may take, whatever the request carried.
const MAX_RECORD_BYTES: usize = 8 * 1024;

const HALF_MB: usize = 500_000;

fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .verb(
            "echo",
            Verb::command(Category::ReadOnly, "/bin/echo {text}")
                .description("echo a word")
                .roles(&["agent"])
                .param("text", Param::matching("[a-z]{1,8}")),
        )
        .verb(
            "save",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/data"])
                .description("write a file beneath data")
                .without_approval()
                .roles(&["agent"]),
        )
        .render()
}

fn call(verb: &str, args: BTreeMap<String, Value>) -> Request {
    Request::Call {
        verb: verb.into(),
        args,
        reason: None,
        idempotency_key: None,
        stream: None,
    }
}

fn sha256_hex(text: &str) -> String {
    verbd::digest::sha256_hex(text.as_bytes())
}

/// The hostile requests, each about half a megabyte, and what each must be answered.
fn hostile_requests() -> Vec<(&'static str, Request)> {
    let long_verb = "v".repeat(HALF_MB);
    let long_param = "p".repeat(HALF_MB);
    let many_params: BTreeMap<String, Value> = (0..40_000)
        .map(|n| (format!("param{n:06}"), json!("x")))
        .collect();
    let array: Vec<Value> = (0..100_000).map(|_| json!("abc")).collect();
    let nested = json!({"a": [{"b": "y".repeat(HALF_MB)}]});
    vec![
        ("long verb name", call(&long_verb, BTreeMap::new())),
        (
            "long parameter name",
            call("echo", BTreeMap::from([(long_param, json!("hi"))])),
        ),
        ("40,000 parameters", call("echo", many_params)),
        (
            "an array value",
            call(
                "echo",
                BTreeMap::from([("text".into(), Value::Array(array))]),
            ),
        ),
        (
            "a nested object value",
            call("echo", BTreeMap::from([("text".into(), nested)])),
        ),
        (
            "a long value the reason quotes",
            call(
                "echo",
                BTreeMap::from([("text".into(), json!("Z".repeat(60_000)))]),
            ),
        ),
        (
            "a long check path and tool",
            Request::Check {
                path: format!("/{}", "d/".repeat(HALF_MB / 2)),
                tool: Some("t".repeat(HALF_MB)),
            },
        ),
        (
            "a long check path of control characters",
            Request::Check {
                path: format!("/{}", "\u{1}".repeat(HALF_MB / 8)),
                tool: Some("\u{2}".repeat(HALF_MB / 8)),
            },
        ),
    ]
}

fn record_sizes(d: &Daemon) -> Vec<(usize, Value)> {
    d.journal()
        .lines()
        .map(|line| (line.len() + 1, serde_json::from_str::<Value>(line).unwrap()))
        .collect()
}

#[test]
fn hostile_requests_of_half_a_megabyte_make_journal_records_of_a_few_kib() {
    let d = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir(dir.join("data")).unwrap();
    });
    d.open_socket();
    let before = record_sizes(&d).len();
    let requests = hostile_requests();
    let sent: Vec<Request> = requests.iter().map(|(_, r)| r.clone()).collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &sent);
    for ((what, _), answer) in requests.iter().zip(&answers) {
        assert!(answer.is_some(), "{what}: no answer");
        match hostile::decode(answer) {
            Response::Denied { .. } | Response::Invalid { .. } => {}
            Response::Check { allowed: false, .. } => {}
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    // A uid without a role, with a large request too.
    let stranger = hostile::requests_as(
        STRANGER,
        &d.socket,
        &[call(&"s".repeat(HALF_MB), BTreeMap::new())],
    );
    assert!(matches!(
        hostile::decode(&stranger[0]),
        Response::Denied { .. }
    ));

    let records = record_sizes(&d);
    let new = &records[before..];
    let kinds: Vec<&str> = new
        .iter()
        .map(|(_, r)| r["event"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "refused").count(),
        6,
        "one refused record per hostile call: {kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "check").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "connect_refused").count(),
        1,
        "{kinds:?}"
    );
    let largest = new.iter().map(|(size, _)| *size).max().unwrap();
    println!(
        "{} records from {} requests of ~0.5 MB; largest record {largest} bytes",
        new.len(),
        requests.len() + 1
    );
    for (size, record) in new {
        println!("{size:>9} bytes: {}", record["event"]["kind"]);
    }
    for (size, record) in new {
        let text = record.to_string();
        assert!(
            *size <= MAX_RECORD_BYTES,
            "a {size}-byte record (limit {MAX_RECORD_BYTES}): {}…",
            text.chars().take(300).collect::<String>()
        );
    }
    // What was cut still names its length and hash, so the record stays evidence.
    let journal = d.journal();
    let long_verb = "v".repeat(HALF_MB);
    assert!(
        journal.contains(&format!(
            "[{HALF_MB} bytes, sha256 {}]",
            sha256_hex(&long_verb)
        )),
        "the long verb name is recorded as prefix + length + sha256"
    );
    let long_tool = "t".repeat(HALF_MB);
    assert!(
        journal.contains(&format!(
            "[{HALF_MB} bytes, sha256 {}]",
            sha256_hex(&long_tool)
        )),
        "the long tool name is recorded as prefix + length + sha256"
    );
    let refused_many = new
        .iter()
        .map(|(_, r)| &r["event"])
        .find(|e| e["kind"] == "refused" && e["args_omitted"].is_object())
        .expect("the call with 40,000 parameters records how many were left out");
    assert_eq!(
        refused_many["args_omitted"]["count"],
        40_000 - verbd::events::MAX_ARGS_SHOWN
    );
}

/// Refusals flooded by one caller, and by a uid without a role: past each caller's share per
/// window they are counted, and the counts reach the journal (and `audit tail`) at the latest
/// at the daemon's stop.
#[test]
fn a_refusal_flood_is_journaled_as_a_bounded_number_of_records_with_its_count() {
    use verbd::events::RefusalClass;
    let mut d = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir(dir.join("data")).unwrap();
    });
    d.open_socket();
    let before = record_sizes(&d).len();
    const FLOOD: usize = 200;
    let started = std::time::Instant::now();
    let flood: Vec<Request> = (0..FLOOD)
        .map(|n| call(&format!("no-such-verb-{n}"), BTreeMap::new()))
        .collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &flood);
    let strangers = hostile::requests_as(STRANGER, &d.socket, &flood[..60]);
    let elapsed = started.elapsed();
    for answer in answers.iter().chain(&strangers) {
        assert!(
            matches!(hostile::decode(answer), Response::Denied { .. }),
            "every flooded call is refused"
        );
    }
    // The clean stop journals the counts of the windows still open.
    d.stop();
    let records = record_sizes(&d);
    let new: Vec<&Value> = records[before..].iter().map(|(_, r)| &r["event"]).collect();
    let full = |kind: &str, uid: u32| {
        new.iter()
            .filter(|e| e["kind"] == kind && e["caller"]["uid"] == uid)
            .count() as u64
    };
    let counted = |class: RefusalClass, uid: u32| -> u64 {
        let class = serde_json::to_value(class).unwrap();
        new.iter()
            .filter(|e| e["kind"] == "refusals_coalesced" && e["class"] == class)
            .filter(|e| e["caller"]["uid"] == uid)
            .map(|e| e["count"].as_u64().unwrap())
            .sum()
    };
    let windows = elapsed.as_secs() / verbd::server::REFUSAL_WINDOW.as_secs() + 1;
    let share = u64::from(verbd::server::FULL_RECORDS_PER_WINDOW) * windows;
    let agent_full = full("refused", AGENT);
    let stranger_full = full("connect_refused", STRANGER);
    println!(
        "{FLOOD} refusals in {elapsed:?}: {agent_full} records + {} counted; 60 role-less: {stranger_full} records + {} counted",
        counted(RefusalClass::Denied, AGENT),
        counted(RefusalClass::ConnectRefused, STRANGER)
    );
    assert!(
        agent_full <= share,
        "{agent_full} refused records for one caller in {windows} window(s); at most {share}"
    );
    assert!(
        stranger_full <= share,
        "{stranger_full} connect_refused records"
    );
    assert_eq!(
        agent_full + counted(RefusalClass::Denied, AGENT),
        FLOOD as u64,
        "every refusal is in the journal, one by one or counted"
    );
    assert_eq!(
        stranger_full + counted(RefusalClass::ConnectRefused, STRANGER),
        60
    );
    // `audit tail` shows the count.
    let tail = std::process::Command::new(BIN)
        .args(["audit", "tail", "-n", "20", "--state-dir"])
        .arg(&d.state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&tail.stdout);
    let shown = text
        .lines()
        .find(|l| l.contains("refusals_coalesced") && l.contains(&format!("({AGENT})")))
        .unwrap_or_else(|| panic!("audit tail shows no coalesced refusals:\n{text}"));
    assert!(
        shown.contains(&format!("count={}", counted(RefusalClass::Denied, AGENT))) || windows > 1,
        "{shown}"
    );
}

/// A caller in `rewrite` mode whose shell commands map onto a verb.
const MAPPER: u32 = 61472;

fn mapping_policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[MAPPER])
        .commands("agent", CommandMode::Rewrite)
        .privileged_paths(&["@DIR@/logs"])
        .sandbox("logs", Sandbox::logs())
        .verb("log-tail", Verb::log_tail(&["agent"]).sandbox("logs"))
        .render()
}

/// Shell commands that map onto a verb, flooded by one caller in `rewrite` mode (each one
/// different, so no de-duplication of identical commands hides the flood): before, every one
/// was a `command_mapped` record (one per request, without bound). Now past the caller's share
/// per window they are answered the same way but counted into `commands_coalesced`, and the
/// counts reach the journal at the latest at the daemon's stop.
#[test]
fn a_command_mapping_flood_is_journaled_as_a_bounded_number_of_records_with_its_count() {
    let mut d = Daemon::start_with(&mapping_policy(), |dir| {
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::write(dir.join("logs/app.log"), "1 ERROR upstream timed out\n").unwrap();
    });
    d.open_socket();
    let before = record_sizes(&d).len();
    let bytes_before = d.journal().len();
    const FLOOD: usize = 2_000;
    let log = d.path("logs/app.log");
    let flood: Vec<Request> = (0..FLOOD)
        .map(|n| Request::Command {
            command: format!(
                "sudo tail -n {} {} | grep -i error",
                1 + n % 1000,
                log.display()
            ),
            cwd: Some("/".into()),
            tool: Some("claude-code Bash".into()),
        })
        .collect();
    let started = std::time::Instant::now();
    let answers = hostile::requests_as(MAPPER, &d.socket, &flood);
    let elapsed = started.elapsed();
    for answer in &answers {
        match hostile::decode(answer) {
            Response::Command {
                decision: verbd::protocol::CommandDecision::Rewrite(call),
            } => assert_eq!(call.verb, "log-tail"),
            other => panic!("every flooded command is rewritten: {other:?}"),
        }
    }
    // The clean stop journals the counts of the windows still open.
    d.stop();
    let records = record_sizes(&d);
    let grown = d.journal().len() - bytes_before;
    let new: Vec<&Value> = records[before..].iter().map(|(_, r)| &r["event"]).collect();
    let full = new
        .iter()
        .filter(|e| e["kind"] == "command_mapped" && e["caller"]["uid"] == MAPPER)
        .count() as u64;
    let counted: u64 = new
        .iter()
        .filter(|e| e["kind"] == "commands_coalesced" && e["caller"]["uid"] == MAPPER)
        .map(|e| {
            assert_eq!(e["decision"], "rewrite", "{e}");
            e["count"].as_u64().unwrap()
        })
        .sum();
    let windows = elapsed.as_secs() / verbd::server::REFUSAL_WINDOW.as_secs() + 1;
    let share = u64::from(verbd::server::FULL_RECORDS_PER_WINDOW) * windows;
    println!(
        "{FLOOD} mapped commands in {elapsed:?}: {full} command_mapped records + {counted} counted; \
         the journal grew {grown} bytes ({} bytes per 10,000 requests)",
        grown * 10_000 / FLOOD
    );
    assert!(
        full <= share,
        "{full} command_mapped records for one caller in {windows} window(s); at most {share}"
    );
    assert_eq!(
        full + counted,
        FLOOD as u64,
        "every mapped command is in the journal, one by one or counted"
    );
}
