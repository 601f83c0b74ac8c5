//! `verbd status` (issues 12 and 18, "See it run"), against a real daemon with real callers:
//! the counters move exactly as calls happen, the JSON has every field, the Prometheus text
//! passes a strict reading of the exposition format, `--output` replaces the file atomically
//! (and says `verbd_up 0` when the daemon is gone), and an agent sees no counters.
use crate::common;

use common::policy::{Category, Param, Policy, Verb};
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const AGENT: u32 = 61480;
const OPS: u32 = 61481;
const SRE: u32 = 61482;

fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("ops", &[OPS])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .verb(
            "echo",
            Verb::command(Category::ReadOnly, "/bin/echo {text}")
                .description("echo a word")
                .roles(&["agent"])
                .param("text", Param::matching("[a-z]{1,8}")),
        )
        .verb(
            "touch",
            Verb::command(Category::Mutating, "/bin/true {name}")
                .description("create a marker (needs approval)")
                .roles(&["agent"])
                .param("name", Param::matching("[a-z]{1,8}")),
        )
        .render()
}

fn status_json(d: &Daemon, uid: u32) -> (i32, Value) {
    let out = d.cli_as(uid, &["status", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), value)
}

fn calls(status: &Value) -> BTreeMap<(String, String), u64> {
    status["metrics"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                (
                    c["verb"].as_str().unwrap().to_string(),
                    c["outcome"].as_str().unwrap().to_string(),
                ),
                c["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn counters_move_exactly_as_calls_happen_and_agents_see_none() {
    let d = Daemon::start(&policy());
    d.open_socket();
    let (code, before) = status_json(&d, OPS);
    assert_eq!(code, 0, "{before}");
    assert!(calls(&before).is_empty(), "{before}");

    for word in ["a", "b", "c"] {
        let out = d.cli_as(AGENT, &["call", "echo", &format!("text={word}")]);
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(
        d.cli_as(AGENT, &["call", "no-such-verb"]).status.code(),
        Some(77)
    );
    assert_eq!(
        d.cli_as(AGENT, &["call", "echo", "text=NOPE"])
            .status
            .code(),
        Some(65)
    );
    let proposed = d.cli_as(AGENT, &["call", "touch", "name=m"]);
    assert_eq!(proposed.status.code(), Some(73), "{proposed:?}");
    let pending = d.cli_as(SRE, &["pending", "--json"]);
    let pending: Value = serde_json::from_slice(&pending.stdout).unwrap();
    let id = pending[0]["id"].as_u64().unwrap();
    let hash = pending[0]["args_hash"].as_str().unwrap()[..12].to_string();

    let (_, mid) = status_json(&d, OPS);
    assert_eq!(mid["metrics"]["proposals"]["pending"], 1, "{mid}");
    let approved = d.cli_as(SRE, &["approve", &id.to_string(), "--hash", &hash]);
    assert!(approved.status.success(), "{approved:?}");

    let (code, status) = status_json(&d, OPS);
    assert_eq!(code, 0);
    println!("{}", serde_json::to_string_pretty(&status).unwrap());
    let expected: BTreeMap<(String, String), u64> = [
        (("echo", "ok"), 3),
        (("(unknown)", "denied"), 1),
        (("echo", "invalid"), 1),
        (("touch", "proposed"), 1),
    ]
    .into_iter()
    .map(|((v, o), n)| ((v.to_string(), o.to_string()), n))
    .collect();
    assert_eq!(calls(&status), expected);
    let m = &status["metrics"];
    assert_eq!(m["refusals"]["not_available"], 1, "{m}");
    assert_eq!(m["refusals"]["pattern"], 1, "{m}");
    assert_eq!(m["refusals"].as_object().unwrap().len(), 2, "{m}");
    assert_eq!(m["call_latency_seconds"]["count"], 6);
    assert_eq!(m["decisions"]["approved"], 1);
    assert_eq!(m["approval_latency_seconds"]["count"], 1);
    assert_eq!(m["proposals"]["pending"], 0);
    // Every field the issue lists.
    for field in ["version", "policy", "policy_hash", "caller"] {
        assert!(!status[field].is_null(), "{field} missing: {status}");
    }
    for field in [
        "uptime_seconds",
        "started_at",
        "calls",
        "call_latency_seconds",
        "refusals",
        "refusals_coalescing",
        "proposals",
        "decisions",
        "approval_latency_seconds",
        "busy",
        "connections_in_flight",
        "waits_parked",
        "busy_paced",
        "max_busy_paced",
        "max_connections",
        "executions_in_flight",
        "max_executions",
        "journal",
        "state",
    ] {
        assert!(!m[field].is_null(), "metrics.{field} missing: {m}");
    }
    for field in [
        "bytes",
        "segments",
        "bytes_last_minute",
        "last_seq",
        "witness",
    ] {
        assert!(!m["journal"][field].is_null(), "journal.{field} missing");
    }
    assert!(m["journal"]["bytes"].as_u64().unwrap() > 0);
    assert!(m["journal"]["bytes_last_minute"].as_u64().unwrap() > 0);
    assert!(m["uptime_seconds"].as_f64().unwrap() > 0.0);

    // An agent gets the daemon's identity and no counters, and `--json` says it was refused.
    let (code, agent) = status_json(&d, AGENT);
    assert_eq!(code, 77, "{agent}");
    assert!(
        agent.get("metrics").is_none(),
        "an agent sees counters: {agent}"
    );
    assert_eq!(agent["caller"]["uid"], AGENT);

    // The Prometheus text, read strictly.
    let out = d.cli_as(OPS, &["status", "--prometheus"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let samples = parse_exposition(&text);
    let value = |series: &str| {
        *samples
            .get(series)
            .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
    };
    assert_eq!(value(r#"verbd_calls_total{verb="echo",outcome="ok"}"#), 3.0);
    assert_eq!(value(r#"verbd_refusals_total{rule="not_available"}"#), 1.0);
    assert_eq!(value(r#"verbd_call_duration_seconds_count"#), 6.0);
    assert_eq!(
        value(r#"verbd_call_duration_seconds_bucket{le="+Inf"}"#),
        6.0
    );
    assert_eq!(value(r#"verbd_approval_latency_seconds_count"#), 1.0);
    assert_eq!(value("verbd_up"), 1.0);
    assert!(value("verbd_journal_bytes") > 0.0);
}

#[test]
fn output_is_replaced_atomically_and_says_down_when_the_daemon_is_gone() {
    let mut d = Daemon::start(&policy());
    d.open_socket();
    let dir = open_tempdir();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let target = dir.path().join("verbd.prom");
    let socket = d.socket.to_str().unwrap().to_string();
    let args = [
        "status",
        "--prometheus",
        "--socket",
        &socket,
        "--output",
        target.to_str().unwrap(),
    ];
    let out = d.cli_as(OPS, &args);
    assert!(out.status.success(), "{out:?}");
    let first = std::fs::read_to_string(&target).unwrap();
    parse_exposition(&first);
    assert!(first.contains("verbd_up 1\n"));
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "a temporary file was left behind");
    d.stop();
    let out = d.cli_as(OPS, &args);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let down = std::fs::read_to_string(&target).unwrap();
    assert_eq!(
        parse_exposition(&down).get("verbd_up"),
        Some(&0.0),
        "{down}"
    );
}

/// A strict reader of the text exposition format (0.0.4): every line is a `# HELP`, a `# TYPE`
/// or a sample; names and labels have their grammar; every sample belongs to a family typed
/// before it, once; histogram buckets are cumulative and end with `+Inf` equal to `_count`; no
/// series twice. Returns each series (name with its labels as written) and its value.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    assert!(
        text.ends_with('\n'),
        "the exposition must end with a newline"
    );
    let name_ok = |name: &str| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped: BTreeSet<String> = BTreeSet::new();
    let mut samples: BTreeMap<String, f64> = BTreeMap::new();
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(name_ok(name) && !help.is_empty(), "bad HELP: {line}");
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(name_ok(name), "bad TYPE name: {line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "bad TYPE kind: {line}"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice for {name}"
            );
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "stray line: {line:?}"
        );
        let (series, value) = line.rsplit_once(' ').expect("sample: series value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            number => number
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                (name, parse_labels(body, line))
            }
        };
        assert!(
            name_ok(name) && name.starts_with("verbd_"),
            "bad name: {line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample before its TYPE: {line}");
        if name.ends_with("_bucket") && family != name {
            let le = labels.get("le").expect("a bucket has le");
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            buckets
                .entry(family.to_string())
                .or_default()
                .push((bound, value));
        }
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "series twice: {series}"
        );
    }
    for (family, list) in &buckets {
        assert!(
            list.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
            "{family}: buckets not cumulative: {list:?}"
        );
        let last = list.last().unwrap();
        assert_eq!(last.0, f64::INFINITY, "{family}: no +Inf bucket");
        assert_eq!(
            Some(&last.1),
            samples.get(&format!("{family}_count")),
            "{family}: +Inf bucket differs from _count"
        );
    }
    samples
}

fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").expect("label=\"value\"");
        assert!(
            name.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad label name in {line}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("unterminated label value") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect("dangling escape").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    other => panic!("bad escape \\{other} in {line}"),
                },
                (_, c) => value.push(c),
            }
        };
        assert!(
            labels.insert(name.to_string(), value).is_none(),
            "label twice in {line}"
        );
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    labels
}

const HOSTILE: u32 = 63000;
const OTHER_AGENT: u32 = 63001;

fn two_agents() -> String {
    Policy::new()
        .allow_root()
        .agents("hostile", &[HOSTILE])
        .agents("worker", &[OTHER_AGENT])
        .humans("ops", &[OPS])
        .verb(
            "nap",
            Verb::command(Category::ReadOnly, "/bin/sleep 3")
                .description("sleep a while")
                .roles(&["worker"]),
        )
        .render()
}

/// The hostile agent polls `status` while another agent's verb runs: on the old code its answer
/// said `executions_in_flight: 1` (another caller's activity, and when an approved run starts,
/// that a human is at the keyboard). Now an agent's answer has no daemon-wide figure at all; a
/// human's has it inside `metrics`.
#[test]
fn an_agent_cannot_see_other_callers_executions_in_flight() {
    if !require_root("an_agent_cannot_see_other_callers_executions_in_flight") {
        return;
    }
    let d = Daemon::start(&two_agents());
    d.open_socket();
    let socket = d.socket.clone();
    let worker = std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(BIN)
            .args(["call", "nap"])
            .env("VERBD_SOCKET", &socket)
            .uid(OTHER_AGENT)
            .gid(OTHER_AGENT)
            .output()
            .unwrap()
    });
    // Wait until the human sees the run, then ask as the hostile agent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (_, ops) = status_json(&d, OPS);
        if ops["metrics"]["executions_in_flight"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the human never saw the run: {ops}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (_, agent) = status_json(&d, HOSTILE);
    println!("hostile agent's status: {agent}");
    assert_eq!(agent["caller"]["uid"], HOSTILE, "{agent}");
    let text = agent.to_string();
    assert!(
        !text.contains("in_flight"),
        "an agent sees a daemon-wide figure: {agent}"
    );
    let plain = d.cli_as(HOSTILE, &["status"]);
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(
        !plain.contains("in flight"),
        "the text form shows it: {plain}"
    );
    let prom = d.cli_as(HOSTILE, &["status", "--prometheus"]);
    let prom = String::from_utf8_lossy(&prom.stdout);
    assert!(!prom.contains("in_flight"), "{prom}");
    assert!(worker.join().unwrap().status.success());
}
