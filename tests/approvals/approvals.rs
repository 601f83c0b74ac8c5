//! Invariants 4, 5 and 9 end to end: approvals bound to exact arguments and used once, headless
//! denial, durability across kill -9, unknown outcomes never re-run, idempotency and rate limits.
use crate::common;
use common::policy::{Category, Command, Param, ParamType, Policy, Verb};
use common::*;
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response};

const AGENT: u32 = 61101;
const SRE: u32 = 61102;
const OTHER_HUMAN: u32 = 61103;
const SRE2: u32 = 61104;

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("sre", &[SRE, SRE2])
        .humans("ops", &[OTHER_HUMAN])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .verb(
            "count",
            Verb::builtin(Category::Mutating, "file.append", &["@DIR@/out"])
                .description("append a line to the counter file")
                .roles(&["agent", "sre", "ops"]),
        )
        .verb(
            "nuke",
            Verb::command(Category::Destructive, "/bin/echo deleted {name}")
                .description("pretend to delete a pod")
                .dry_run("/bin/echo would delete pod/{name}")
                .roles(&["agent"])
                .param("name", Param::of(ParamType::K8sName)),
        )
        .verb(
            "purge",
            Verb::command(Category::Destructive, "/bin/echo purged {count}")
                .description("pretend to purge the numbered entries; the dry run lists them")
                .dry_run("/usr/bin/seq 1 {count}")
                .roles(&["agent"])
                .param("count", Param::int(1, 100000)),
        )
        .verb(
            "sleepy",
            Verb::command(Category::Mutating, "/bin/sleep {secs}")
                .description("a long mutation")
                .roles(&["agent"])
                .timeout("120s")
                .param("secs", Param::int(1, 999)),
        )
        .verb(
            "limited",
            Verb::command(Category::ReadOnly, "/bin/echo ok")
                .description("rate limited read")
                .roles(&["agent"])
                .rate("2/h"),
        )
        .verb(
            "stamp",
            Verb::command(Category::ReadOnly, "/bin/date +%s%N")
                .description("read-only with idempotency")
                .roles(&["agent"]),
        )
}

fn start(policy: Policy) -> Daemon {
    Daemon::start_open(&policy.render(), &["out"])
}

fn counter(d: &Daemon) -> String {
    d.path("out/counter").to_string_lossy().into_owned()
}

fn lines(d: &Daemon) -> usize {
    std::fs::read_to_string(counter(d))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Propose `count` as the agent; returns (id, hash).
fn propose_count(d: &Daemon, content: &str) -> (u64, String) {
    let proposed = d.propose_as(
        AGENT,
        &[
            "--reason",
            "testing",
            "count",
            &format!("path={}", counter(d)),
            &format!("content={content}"),
        ],
    );
    assert!(
        proposed.answer["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("CONFIRM_REQUIRED {}", proposed.id))
    );
    (proposed.id, proposed.hash)
}

fn approve(d: &Daemon, uid: u32, id: u64, hash: &str) -> std::process::Output {
    d.approve_as(uid, id, &hash[..12])
}

#[test]
fn approval_runs_exactly_the_proposed_call_once() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let (id, hash) = propose_count(&d, "one\n");
    assert_eq!(lines(&d), 0, "nothing runs before approval");
    // Same caller, same args: same proposal.
    let (again, _) = propose_count(&d, "one\n");
    assert_eq!(again, id);
    // Different args: a new proposal, which the first approval does not cover.
    let (other, other_hash) = propose_count(&d, "two\n");
    assert_ne!(other, id);
    assert_ne!(other_hash, hash);
    let out = approve(&d, SRE, id, &hash);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(std::fs::read_to_string(counter(&d)).unwrap(), "one\n");
    // Used once: a second approval does nothing.
    let out = approve(&d, SRE2, id, &hash);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already decided"),
        "{out:?}"
    );
    assert_eq!(lines(&d), 1);
    assert_eq!(d.execs_of(id), 1);
    // The other proposal is still pending and untouched.
    let out = d.cli_as(SRE, &["pending", "--json"]);
    let pending: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["id"], other);
    // The requester sees the outcome.
    let out = d.cli_as(AGENT, &["result", &id.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "succeeded");
    // A stranger sees nothing.
    let out = d.cli_as(OTHER_HUMAN, &["result", &id.to_string()]);
    assert_eq!(out.status.code(), Some(77));
}

#[test]
fn only_an_approver_or_the_requester_may_deny() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    // Someone who is neither (a human of another role) cannot deny, so cannot sink a proposal.
    let (id, _) = propose_count(&d, "x\n");
    let out = d.cli_as(
        OTHER_HUMAN,
        &["deny", &id.to_string(), "--reason", "mine now"],
    );
    assert_ne!(out.status.code(), Some(0), "a stranger denied: {out:?}");
    let out = d.cli_as(SRE, &["pending", "--json"]);
    let pending: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        pending[0]["id"], id,
        "the proposal no longer stands: {pending}"
    );
    // The requester may withdraw their own, though not an approver.
    let out = d.cli_as(AGENT, &["deny", &id.to_string(), "--reason", "withdrawn"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the requester could not withdraw: {out:?}"
    );
    let out = d.cli_as(
        AGENT,
        &["wait", &id.to_string(), "--timeout", "1", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "denied");
    assert_eq!(d.execs_of(id), 0);
}

#[test]
fn a_wait_ends_when_the_proposal_is_decided_or_expires_not_at_its_timeout() {
    if !require_root("approvals") {
        return;
    }
    // `verbd wait --timeout 60` is what an agent parks on; it must answer as soon as there is
    // an answer. The bounds below are a fraction of the 60 s timeout, not performance figures.
    let d = start(policy().approvals_expire("3s"));
    let (decided, _) = propose_count(&d, "decided\n");
    let out = d.cli_as(SRE, &["deny", &decided.to_string(), "--reason", "no"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (expiring, _) = propose_count(&d, "expiring\n");
    for (id, state, within) in [
        (decided, "denied", Duration::from_secs(10)),
        (expiring, "expired", Duration::from_secs(20)),
    ] {
        let started = Instant::now();
        let out = d.cli_as(
            AGENT,
            &["wait", &id.to_string(), "--timeout", "60", "--json"],
        );
        let took = started.elapsed();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["state"], state, "{out:?}");
        assert!(
            took < within,
            "a wait on a {state} proposal answered after {took:?}, not when it was {state}"
        );
    }
}

#[test]
fn denied_proposal_never_runs() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let (id, hash) = propose_count(&d, "x\n");
    let out = d.cli_as(SRE, &["deny", &id.to_string(), "--reason", "not now"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = approve(&d, SRE2, id, &hash);
    assert_ne!(out.status.code(), Some(0));
    // The precise reason: the decision stands, not some other failure of `approve`.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("already decided") && said.contains("denied"),
        "{out:?}"
    );
    assert_eq!(lines(&d), 0);
    assert_eq!(d.execs_of(id), 0);
    let out = d.cli_as(
        AGENT,
        &["wait", &id.to_string(), "--timeout", "1", "--json"],
    );
    assert_eq!(out.status.code(), Some(77));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "denied");
}

#[test]
fn who_may_approve() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let (id, hash) = propose_count(&d, "x\n");
    // An agent identity can never approve.
    let out = approve(&d, AGENT, id, &hash);
    assert_eq!(out.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent"),
        "{out:?}"
    );
    // A human outside the approver roles.
    let out = approve(&d, OTHER_HUMAN, id, &hash);
    assert_eq!(out.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an approver"),
        "{out:?}"
    );
    // The wrong hash.
    let out = d.cli_as(SRE, &["approve", &id.to_string(), "--hash", "0123456789ab"]);
    assert_eq!(out.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not match"),
        "{out:?}"
    );
    // Requester = approver: an SRE asks, and cannot approve their own request.
    let out = d.cli_as(
        SRE,
        &[
            "call",
            "--json",
            "count",
            &format!("path={}", counter(&d)),
            "content=mine\n",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let own = v["id"].as_u64().unwrap();
    let out = approve(&d, SRE, own, v["hash"].as_str().unwrap());
    assert_eq!(out.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("own request"),
        "{out:?}"
    );
    assert_eq!(lines(&d), 0, "none of these ran anything");
    // Agents cannot even list pending proposals.
    assert_eq!(d.cli_as(AGENT, &["pending"]).status.code(), Some(77));
}

#[test]
fn expired_proposal_never_runs() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy().approvals_expire("1s"));
    let (id, hash) = propose_count(&d, "x\n");
    std::thread::sleep(Duration::from_millis(1500));
    let out = approve(&d, SRE, id, &hash);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("expired"),
        "{out:?}"
    );
    assert_eq!(lines(&d), 0);
    assert!(
        d.journal_events()
            .iter()
            .any(|e| e["kind"] == "proposal_expired" && e["id"] == id)
    );
}

#[test]
fn concurrent_approvals_execute_once() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let (id, hash) = propose_count(&d, "once\n");
    let socket = d.socket.clone();
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let socket = socket.clone();
            let hash = hash.clone();
            std::thread::spawn(move || {
                let uid = if i % 2 == 0 { SRE } else { SRE2 };
                std::process::Command::new(BIN)
                    .args(["approve", &id.to_string(), "--hash", &hash[..16]])
                    .env("VERBD_SOCKET", &socket)
                    .uid(uid)
                    .gid(uid)
                    .output()
                    .unwrap()
            })
        })
        .collect();
    let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let successes = outs.iter().filter(|o| o.status.code() == Some(0)).count();
    assert_eq!(successes, 1, "{outs:?}");
    assert_eq!(lines(&d), 1, "exactly one execution");
    assert_eq!(d.execs_of(id), 1);
}
use std::os::unix::process::CommandExt;

#[test]
fn pending_proposals_survive_kill_9_and_run_once() {
    if !require_root("approvals") {
        return;
    }
    let mut d = start(policy());
    let (id, hash) = propose_count(&d, "durable\n");
    d.kill9();
    d.respawn();
    d.open_socket();
    let out = d.cli_as(SRE, &["pending", "--json"]);
    let pending: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pending[0]["id"], id, "{pending}");
    assert_eq!(pending[0]["args_hash"], hash.as_str());
    assert_eq!(approve(&d, SRE, id, &hash).status.code(), Some(0));
    d.kill9();
    d.respawn();
    d.open_socket();
    assert_ne!(approve(&d, SRE2, id, &hash).status.code(), Some(0));
    assert_eq!(lines(&d), 1);
    assert_eq!(d.execs_of(id), 1);
}

#[test]
fn kill_9_while_executing_gives_unknown_outcome_never_rerun() {
    if !require_root("approvals") {
        return;
    }
    let mut d = start(policy());
    let out = d.cli_as(AGENT, &["call", "--json", "sleepy", "secs=517"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap();
    let hash = v["hash"].as_str().unwrap().to_string();
    let socket = d.socket.clone();
    let approver = std::thread::spawn(move || {
        std::process::Command::new(BIN)
            .args(["approve", &id.to_string(), "--hash", &hash[..12]])
            .env("VERBD_SOCKET", &socket)
            .uid(SRE)
            .gid(SRE)
            .output()
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_matching("sleep 517").is_empty() {
        assert!(Instant::now() < deadline, "never started: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    d.kill9();
    let _ = approver.join();
    for pid in processes_matching("sleep 517") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    d.respawn();
    d.open_socket();
    let out = d.cli_as(AGENT, &["result", &id.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "unknown_outcome", "{v}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        processes_matching("sleep 517").is_empty(),
        "re-run after restart"
    );
    assert_eq!(d.execs_of(id), 1);
    // Shown to operators, who resolve it explicitly.
    let out = d.cli_as(SRE, &["pending", "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("unknown_outcome"));
    let out = d.cli_as(
        SRE,
        &[
            "resolve",
            &id.to_string(),
            "--outcome",
            "not-run",
            "--note",
            "checked by hand",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn headless_denies_with_the_exact_message() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy().headless());
    let r = d.call("count", &[("path", &counter(&d)), ("content", "x")]);
    // root has no role for count in this policy: call as the agent instead.
    assert!(matches!(r, Response::Denied { .. }));
    let out = d.cli_as(
        AGENT,
        &[
            "call",
            "count",
            &format!("path={}", counter(&d)),
            "content=x",
        ],
    );
    assert_eq!(out.status.code(), Some(77));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "denied: denied by automatic policy: mutating action requires explicit human confirmation"
    );
    let out = d.cli_as(AGENT, &["call", "nuke", "name=web-1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "denied: denied by automatic policy: destructive action requires explicit human confirmation"
    );
    assert_eq!(lines(&d), 0);
}

#[test]
fn destructive_shows_dry_run_output_to_approvers() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let out = d.cli_as(AGENT, &["call", "--json", "nuke", "name=web-7"]);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let out = d.cli_as(SRE, &["pending"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would delete pod/web-7"), "{text}");
    assert!(
        text.contains("will run:    /bin/echo deleted web-7"),
        "{text}"
    );
}

#[test]
fn a_dry_run_cut_for_the_preview_says_so() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let preview = |count: &str| {
        let out = d.cli_as(
            AGENT,
            &["call", "--json", "purge", &format!("count={count}")],
        );
        assert_eq!(out.status.code(), Some(73), "{out:?}");
        let proposal: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let id = proposal["id"].as_u64().unwrap().to_string();
        let out = d.cli_as(SRE, &["result", &id, "--json"]);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        view["dry_run_output"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // Whole: no note.
    let whole = preview("100");
    assert!(whole.contains("\n100\n"), "{whole}");
    assert!(!whole.contains("[cut:"), "{whole}");
    // 30,000 numbers are 168,894 bytes: the preview keeps its 64 KiB and says the rest is cut.
    let cut = preview("30000");
    assert!(
        cut.contains("\n10000\n"),
        "the preview kept less than its 64 KiB"
    );
    assert!(!cut.contains("\n29999\n"), "the preview was not cut");
    assert!(
        cut.contains("[cut: the dry run wrote 168894 bytes; the rest is not shown]"),
        "a cut preview reads as the whole list: {}",
        &cut[cut.len().saturating_sub(300)..]
    );
    let pending = String::from_utf8_lossy(&d.cli_as(SRE, &["pending"]).stdout).into_owned();
    assert!(
        pending.contains("[cut: the dry run wrote 168894 bytes"),
        "`verbd pending` hides the cut"
    );
}

#[test]
fn hostile_arguments_cannot_forge_the_approver_view() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let out = d.cli_as(
        AGENT,
        &[
            "call",
            "--reason",
            "fine\n─── proposal 999 (approved) ───\x1b[2J",
            "count",
            &format!("path={}", counter(&d)),
            "content=a\x1b[1A\rb\n",
        ],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let out = d.cli_as(SRE, &["pending"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\x1b'),
        "raw escape reached the terminal: {text:?}"
    );
    assert!(text.contains("\\u{1b}[2J"));
    assert!(text.contains("reason (UNTRUSTED"));
    let headers = text
        .lines()
        .filter(|l| l.starts_with("─── proposal"))
        .count();
    assert_eq!(headers, 1, "a forged header line appeared: {text}");
}

#[test]
fn idempotency_and_rate_limits() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    let first = d.cli_as(AGENT, &["call", "--idempotency-key", "k1", "stamp"]);
    assert_eq!(first.status.code(), Some(0));
    let again = d.cli_as(AGENT, &["call", "--idempotency-key", "k1", "stamp"]);
    assert_eq!(first.stdout, again.stdout, "replayed, not re-run");
    let runs = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec" && e["verb"] == "stamp")
        .count();
    assert_eq!(runs, 1);
    // Same key, different verb/args: refused.
    let out = d.cli_as(AGENT, &["call", "--idempotency-key", "k1", "limited"]);
    assert_eq!(out.status.code(), Some(77));
    assert!(String::from_utf8_lossy(&out.stderr).contains("different arguments"));
    // Proposal replay under a key.
    let key_call = |content: &str| {
        d.cli_as(
            AGENT,
            &[
                "call",
                "--json",
                "--idempotency-key",
                "k2",
                "count",
                &format!("path={}", counter(&d)),
                &format!("content={content}"),
            ],
        )
    };
    let a: serde_json::Value = serde_json::from_slice(&key_call("z").stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&key_call("z").stdout).unwrap();
    assert_eq!(a["id"], b["id"]);
    // Rate: 2 per hour per caller.
    assert_eq!(d.cli_as(AGENT, &["call", "limited"]).status.code(), Some(0));
    assert_eq!(d.cli_as(AGENT, &["call", "limited"]).status.code(), Some(0));
    let out = d.cli_as(AGENT, &["call", "limited"]);
    assert_eq!(out.status.code(), Some(77));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rate limit"),
        "{out:?}"
    );
}

#[test]
fn changed_template_voids_the_approval() {
    if !require_root("approvals") {
        return;
    }
    let mut d = start(policy());
    let out = d.cli_as(AGENT, &["call", "--json", "nuke", "name=web-9"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap();
    let hash = v["hash"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(&d.policy)
        .unwrap()
        .replace("/bin/echo deleted", "/bin/echo really-deleted");
    std::fs::write(&d.policy, text).unwrap();
    d.respawn();
    d.open_socket();
    let out = approve(&d, SRE, id, &hash);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("policy changed"),
        "{out:?}"
    );
    assert_eq!(d.execs_of(id), 0);
    let _ = Request::List {};
}

#[test]
fn notifier_failure_is_journaled_and_does_not_block_the_proposal() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy().notify(Command::Line("/bin/false {id}".into())));
    let (id, _) = propose_count(&d, "n\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let failed = d
            .journal_events()
            .iter()
            .any(|e| e["kind"] == "notify_failed" && e["id"] == id);
        if failed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no notify_failed record: {}",
            d.journal()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = d.cli_as(SRE, &["pending", "--json"]);
    let pending: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pending[0]["id"], id, "the proposal stands");
}

#[test]
fn a_failed_notifier_s_own_words_are_in_its_record() {
    if !require_root("approvals") {
        return;
    }
    // What the notifier said on stderr is how an operator learns why approvers were not told;
    // it is kept (up to the notifier's output bound) and journaled with its exit code.
    let d = start(policy().notify(Command::Line(
        r#"/usr/bin/python3 -c "import sys; sys.stderr.write('smtp relay refused the message'); sys.exit(3)" {id}"#
            .into(),
    )));
    let (id, _) = propose_count(&d, "n\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let record = loop {
        let found = d
            .journal_events()
            .into_iter()
            .find(|e| e["kind"] == "notify_failed" && e["id"] == id);
        if let Some(record) = found {
            break record;
        }
        assert!(
            Instant::now() < deadline,
            "no notify_failed record: {}",
            d.journal()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let error = record["error"].to_string();
    assert!(
        error.contains("exited with Some(3)") && error.contains("smtp relay refused the message"),
        "the notifier's exit code and words are not in its record: {record}"
    );
}

#[test]
fn requester_who_lost_the_role_cannot_be_approved_for() {
    if !require_root("approvals") {
        return;
    }
    let mut d = start(policy());
    let (id, hash) = propose_count(&d, "late\n");
    d.write_policy(&policy().agents("agent", &[61199]).render());
    d.respawn();
    d.open_socket();
    let out = approve(&d, SRE, id, &hash);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("requester"),
        "{out:?}"
    );
    assert_eq!(lines(&d), 0);
}

#[test]
fn a_flood_of_proposals_is_capped_per_requester() {
    if !require_root("approvals") {
        return;
    }
    let d = start(policy());
    for i in 0..verbd::approvals::MAX_PENDING_PER_REQUESTER {
        propose_count(&d, &format!("n{i}\n"));
    }
    let out = d.cli_as(
        AGENT,
        &[
            "call",
            "count",
            &format!("path={}", counter(&d)),
            "content=one-too-many",
        ],
    );
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("proposals waiting"),
        "{out:?}"
    );
}
