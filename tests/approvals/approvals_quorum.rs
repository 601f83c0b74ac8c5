//! Quorum, separation of duties and break-glass against a real daemon and real uids: a verb
//! with `quorum = { count = 2, from = ["sre", "dba"], max_per_role = 1 }` runs only once two
//! distinct people, one per role, approved it — never on the requester's approval, never on the
//! same person's twice, never on fewer — and a denial by any one ends it; `break_glass` lets a
//! named human role run a verb at once, journaled and announced, and nobody else. The torture
//! test kills the daemon (SIGKILL) at random moments between the approvals of one quorum.
use crate::common;
use common::*;
use std::time::{Duration, Instant};

const AGENT: u32 = 61601;
const SRE1: u32 = 61602;
const SRE2: u32 = 61603;
const DBA: u32 = 61604;
const ONCALL: u32 = 61605;

fn policy() -> String {
    format!(
        r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [{AGENT}]
[roles.sre]
kind = "human"
uids = [{SRE1}, {SRE2}]
[roles.dba]
kind = "human"
uids = [{DBA}]
[roles.oncall]
kind = "human"
uids = [{ONCALL}]
[approvals]
approvers = ["sre", "dba"]
expires = "30m"
notify = "/bin/false {{id}}"

[verb.migrate]
description = "append a line; two people must approve, one sre and one dba"
builtin = "file.append"
category = "mutating"
roles = ["agent", "sre"]
roots = ["@DIR@/out"]
quorum = {{ count = 2, from = ["sre", "dba"], max_per_role = 1 }}

[verb.restart]
description = "append a line; oncall may break glass"
builtin = "file.append"
category = "mutating"
roles = ["agent", "oncall", "sre"]
roots = ["@DIR@/out"]
break_glass = ["oncall"]
"#
    )
}

fn start() -> Daemon {
    let d = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir(dir.join("out")).unwrap();
    });
    d.open_socket();
    d
}

fn counter(d: &Daemon) -> String {
    d.path("out/counter").to_string_lossy().into_owned()
}

fn counter_text(d: &Daemon) -> String {
    std::fs::read_to_string(counter(d)).unwrap_or_default()
}

/// `verb` proposed by `uid`: (id, hash).
fn propose(d: &Daemon, uid: u32, verb: &str, content: &str) -> (u64, String) {
    let out = d.cli_as(
        uid,
        &[
            "call",
            "--json",
            verb,
            &format!("path={}", counter(d)),
            &format!("content={content}"),
        ],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["id"].as_u64().unwrap(),
        v["hash"].as_str().unwrap().to_string(),
    )
}

fn approve(d: &Daemon, uid: u32, id: u64, hash: &str) -> std::process::Output {
    d.cli_as(uid, &["approve", &id.to_string(), "--hash", &hash[..12]])
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The proposal as an approver sees it (`verbd result --json`).
fn view(d: &Daemon, id: u64) -> serde_json::Value {
    let out = d.cli_as(DBA, &["result", &id.to_string(), "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn events_for(d: &Daemon, kind: &str, id: u64) -> Vec<serde_json::Value> {
    let field = if kind == "exec" { "proposal" } else { "id" };
    d.journal_events()
        .into_iter()
        .filter(|e| e["kind"] == kind && e[field] == id)
        .collect()
}

#[test]
fn a_quorum_counts_distinct_people_within_their_roles_and_nothing_runs_short() {
    if !require_root("approvals_quorum") {
        return;
    }
    let mut d = start();
    let (id, hash) = propose(&d, AGENT, "migrate", "one\n");

    let first = approve(&d, SRE1, id, &hash);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert!(said(&first).contains("approval 1 of 2"), "{first:?}");
    assert_eq!(view(&d, id)["state"], "pending");
    assert_eq!(counter_text(&d), "", "ran on one approval of two");

    // The same person again does not count.
    let again = approve(&d, SRE1, id, &hash);
    assert_ne!(again.status.code(), Some(0), "{again:?}");
    assert!(said(&again).contains("already approved"), "{again:?}");
    // Another sre: that role has given its one approval (max_per_role = 1).
    let same_role = approve(&d, SRE2, id, &hash);
    assert_ne!(same_role.status.code(), Some(0), "{same_role:?}");
    assert!(said(&same_role).contains("max_per_role"), "{same_role:?}");
    // The agent never approves.
    let agent = approve(&d, AGENT, id, &hash);
    assert_ne!(agent.status.code(), Some(0), "{agent:?}");
    assert_eq!(counter_text(&d), "", "ran on a refused approval");
    assert_eq!(view(&d, id)["state"], "pending");
    assert_eq!(view(&d, id)["approvals"].as_array().unwrap().len(), 1);
    let refused = events_for(&d, "approval_refused", id);
    assert_eq!(refused.len(), 3, "{refused:?}");

    // `verbd pending` shows who approved and what is missing.
    let pending = d.cli_as(DBA, &["pending"]);
    let text = String::from_utf8_lossy(&pending.stdout);
    assert!(
        text.contains(&format!("approved by: uid {SRE1}")) && text.contains(" as sre"),
        "{text}"
    );
    assert!(
        text.contains("missing:     1 more, from sre or dba, at most 1 per role"),
        "{text}"
    );

    // A restart keeps the journaled approval.
    d.kill9();
    d.respawn();
    d.open_socket();
    let approvals = view(&d, id)["approvals"].clone();
    assert_eq!(approvals[0]["uid"], SRE1, "{approvals}");
    assert_eq!(approvals[0]["role"], "sre", "{approvals}");

    let last = approve(&d, DBA, id, &hash);
    assert_eq!(last.status.code(), Some(0), "{last:?}");
    assert_eq!(counter_text(&d), "one\n");
    let given = events_for(&d, "proposal_approval_given", id);
    assert_eq!(given.len(), 1, "{given:?}");
    assert_eq!(given[0]["by"]["uid"], SRE1);
    let approved = events_for(&d, "proposal_approved", id);
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["by"]["uid"], DBA);
    assert_eq!(approved[0]["role"], "dba");
    assert_eq!(events_for(&d, "exec", id).len(), 1);

    // Used once.
    let after = approve(&d, SRE2, id, &hash);
    assert_ne!(after.status.code(), Some(0), "{after:?}");
    assert_eq!(counter_text(&d), "one\n");
}

#[test]
fn the_requester_never_counts_and_one_denial_ends_a_quorum() {
    if !require_root("approvals_quorum") {
        return;
    }
    let d = start();
    // A person in sre proposes: their own approval is refused even though sre counts.
    let (id, hash) = propose(&d, SRE2, "migrate", "two\n");
    let own = approve(&d, SRE2, id, &hash);
    assert_ne!(own.status.code(), Some(0), "{own:?}");
    assert!(said(&own).contains("their own request"), "{own:?}");
    assert!(view(&d, id)["approvals"].is_null(), "{}", view(&d, id));

    let first = approve(&d, SRE1, id, &hash);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let deny = d.cli_as(DBA, &["deny", &id.to_string(), "--reason", "not today"]);
    assert_eq!(deny.status.code(), Some(0), "{deny:?}");
    assert_eq!(view(&d, id)["state"], "denied");
    let late = approve(&d, DBA, id, &hash);
    assert_ne!(late.status.code(), Some(0), "{late:?}");
    assert!(said(&late).contains("already decided"), "{late:?}");
    assert_eq!(counter_text(&d), "", "a denied quorum ran");
    assert!(events_for(&d, "exec", id).is_empty());
}

#[test]
fn break_glass_runs_at_once_loudly_and_only_for_its_roles() {
    if !require_root("approvals_quorum") {
        return;
    }
    let d = start();
    let path = format!("path={}", counter(&d));
    let glass = |uid: u32, content: &str| {
        d.cli_as(
            uid,
            &[
                "call",
                "--break-glass",
                "--reason",
                "the site is down",
                "restart",
                &path,
                &format!("content={content}"),
            ],
        )
    };
    // Neither a person outside the break_glass roles nor an agent.
    let sre = glass(SRE1, "sre\n");
    assert_eq!(sre.status.code(), Some(77), "{sre:?}");
    assert!(said(&sre).contains("break-glass refused"), "{sre:?}");
    let agent = glass(AGENT, "agent\n");
    assert_eq!(agent.status.code(), Some(77), "{agent:?}");
    assert!(said(&agent).contains("agent role"), "{agent:?}");
    // Nor on a verb that names no break_glass role.
    let other = d.cli_as(
        SRE1,
        &[
            "call",
            "--break-glass",
            "migrate",
            &path,
            "content=migrate\n",
        ],
    );
    assert_eq!(other.status.code(), Some(77), "{other:?}");
    assert_eq!(counter_text(&d), "", "a refused break-glass ran");
    assert!(
        d.journal_events()
            .iter()
            .all(|e| e["kind"] != "proposal_break_glass")
    );

    let oncall = glass(ONCALL, "oncall\n");
    assert_eq!(oncall.status.code(), Some(0), "{oncall:?}");
    assert_eq!(counter_text(&d), "oncall\n");
    let broken: Vec<serde_json::Value> = d
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "proposal_break_glass")
        .collect();
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0]["by"]["uid"], ONCALL);
    assert_eq!(broken[0]["roles"], serde_json::json!(["oncall"]));
    let id = broken[0]["id"].as_u64().unwrap();
    assert_eq!(events_for(&d, "exec", id).len(), 1);
    assert_eq!(view(&d, id)["break_glass"], true);
    // The notifier was started for it (it fails here, which is journaled with the id).
    let deadline = Instant::now() + Duration::from_secs(10);
    while events_for(&d, "notify_failed", id).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the notifier never ran: {}",
            d.journal()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // `status` counts it.
    let status = d.cli_as(SRE1, &["status", "--json"]);
    let status: serde_json::Value =
        serde_json::from_slice(&status.stdout).unwrap_or_else(|e| panic!("{e}: {status:?}"));
    assert_eq!(status["metrics"]["decisions"]["break_glass"], 1, "{status}");
}

/// A small deterministic generator (the seed is printed, so a failure can be replayed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Approve in the background and kill the daemon `delay_ms` later, then start it again.
fn approve_and_kill(d: &mut Daemon, uid: u32, id: u64, hash: &str, delay_ms: u64) {
    use std::os::unix::process::CommandExt;
    let socket = d.socket.clone();
    let hash = hash[..12].to_string();
    let approver = std::thread::spawn(move || {
        std::process::Command::new(BIN)
            .args(["approve", &id.to_string(), "--hash", &hash])
            .env("VERBD_SOCKET", &socket)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(delay_ms));
    d.kill9();
    let _ = approver.join();
    d.respawn();
    d.open_socket();
}

/// Every run of a proposal in the journal follows two approvals by two people, one `sre` and
/// one `dba`, and no proposal runs twice.
fn assert_no_short_or_double_run(d: &Daemon) {
    let events = d.journal_events();
    let mut runs = std::collections::BTreeMap::<u64, usize>::new();
    for (at, e) in events.iter().enumerate() {
        if e["kind"] != "exec" || e["proposal"].is_null() {
            continue;
        }
        let id = e["proposal"].as_u64().unwrap();
        *runs.entry(id).or_default() += 1;
        let approvals: Vec<&serde_json::Value> = events[..at]
            .iter()
            .filter(|a| {
                a["id"] == id
                    && (a["kind"] == "proposal_approval_given" || a["kind"] == "proposal_approved")
            })
            .collect();
        let uids: std::collections::BTreeSet<u64> = approvals
            .iter()
            .map(|a| a["by"]["uid"].as_u64().unwrap())
            .collect();
        let roles: std::collections::BTreeSet<&str> = approvals
            .iter()
            .map(|a| a["role"].as_str().unwrap_or_default())
            .collect();
        assert!(
            approvals.len() == 2 && uids.len() == 2 && roles.len() == 2,
            "proposal {id} ran after {approvals:?}"
        );
    }
    assert!(
        runs.values().all(|n| *n == 1),
        "a proposal ran twice: {runs:?}"
    );
}

#[test]
fn kill_9_between_the_approvals_of_a_quorum_never_runs_short_or_twice() {
    if !require_root("approvals_quorum") {
        return;
    }
    let seed = std::env::var("QUORUM_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("QUORUM_TORTURE_SEED={seed}");
    let mut random = Lcg(seed);
    let mut d = start();
    for round in 0..8 {
        let content = format!("round {round}\n");
        let (id, hash) = propose(&d, AGENT, "migrate", &content);
        // The first approval, cut at a random moment.
        approve_and_kill(&mut d, SRE1, id, &hash, random.below(40));
        let v = view(&d, id);
        assert_eq!(v["state"], "pending", "ran or ended on one approval: {v}");
        let journaled = events_for(&d, "proposal_approval_given", id).len();
        assert!(journaled <= 1);
        assert_eq!(
            v["approvals"].as_array().map_or(0, Vec::len),
            journaled,
            "the restart lost or invented an approval: {v}"
        );
        assert!(events_for(&d, "exec", id).is_empty(), "ran on one approval");
        // The second, cut too: if the first was lost, this is the first of two.
        approve_and_kill(&mut d, DBA, id, &hash, random.below(60));
        assert_no_short_or_double_run(&d);
        // Approve until it is decided; every answer after a counted approval is a refusal.
        let deadline = Instant::now() + Duration::from_secs(30);
        while view(&d, id)["state"] == "pending" {
            assert!(Instant::now() < deadline, "stuck: {}", view(&d, id));
            let _ = approve(&d, SRE1, id, &hash);
            let _ = approve(&d, DBA, id, &hash);
        }
        let v = view(&d, id);
        let state = v["state"].as_str().unwrap().to_string();
        assert!(
            ["succeeded", "failed", "unknown_outcome"].contains(&state.as_str()),
            "{v}"
        );
        assert_no_short_or_double_run(&d);
        let written = counter_text(&d).matches(&content).count();
        assert!(written <= 1, "round {round} wrote {written} times");
        if state == "succeeded" {
            assert_eq!(written, 1, "{v}");
        }
    }
}

/// `verbd policy check` on the policy above with `replace` applied: its exit code and output.
fn check_variant(replace: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let mut text = policy().replace("@DIR@", dir.path().to_str().unwrap());
    for (from, to) in replace {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let path = dir.path().join("p.toml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["policy", "check", path.to_str().unwrap()])
        .output()
        .unwrap();
    (out.status.code(), said(&out))
}

#[test]
fn the_policy_refuses_a_quorum_or_break_glass_that_cannot_mean_what_it_says() {
    let (code, shown) = check_variant(&[]);
    assert_eq!(code, Some(0), "{shown}");
    let quorum = "quorum = { count = 2, from = [\"sre\", \"dba\"], max_per_role = 1 }";
    for (replace, expected) in [
        (
            (
                quorum,
                "quorum = { count = 3, from = [\"sre\", \"dba\"], max_per_role = 1 }",
            ),
            "a quorum of 3 can never be met",
        ),
        (
            (quorum, "quorum = { count = 0 }"),
            "quorum count = 0: give 1 to 16",
        ),
        (
            (quorum, "quorum = { count = 2, from = [\"agent\"] }"),
            "approver role `agent` is an agent role",
        ),
        (
            (quorum, "quorum = { count = 2, from = [\"oncall\"] }"),
            "quorum role `oncall` cannot approve this verb",
        ),
        (
            (quorum, "quorum = { count = 2, max_per_role = 0 }"),
            "max_per_role = 0 would refuse every approval",
        ),
        (
            (quorum, "quorum = { count = 2, quota = 1 }"),
            "unknown field `quota`",
        ),
        (
            ("break_glass = [\"oncall\"]", "break_glass = [\"agent\"]"),
            "break_glass role `agent` is an agent role",
        ),
        (
            ("break_glass = [\"oncall\"]", "break_glass = [\"dba\"]"),
            "break_glass role `dba` may not call the verb",
        ),
        (
            (
                "[approvals]\n",
                "[approvals]\nquorum.read-only = { count = 2 }\n",
            ),
            "a read-only verb runs without approval",
        ),
    ] {
        let (code, shown) = check_variant(&[replace]);
        assert_ne!(code, Some(0), "{replace:?} was accepted: {shown}");
        assert!(shown.contains(expected), "{replace:?}: {shown}");
    }
}
