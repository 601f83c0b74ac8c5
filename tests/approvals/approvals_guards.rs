//! Invariant 4 one guard at a time, against a real daemon: each test isolates one check of the
//! approval path, so that removing that check alone lets the forbidden run happen (the run is
//! observed: a file written, an `exec` record), and each has a control that runs.
//!
//! - an agent identity never approves, even when it is also listed in a human approver role
//!   (the self-approval and "not an approver" checks cannot stand in: the approver here is
//!   neither the requester nor outside the approver roles);
//! - nobody approves their own request, even an approver;
//! - an approval is bound to the hash of its proposal's arguments: another proposal's hash does
//!   not approve it;
//! - a live reload that changes only the verb's `env` voids a pending approval (the argv, and so
//!   the re-render check, are unchanged: only the verb's fingerprint tells).
use crate::common;
use common::policy::{Category, Param, Policy, Verb};
use common::*;

const AGENT: u32 = 63501;
/// An agent identity that is also listed in the human approver role.
const AGENT_AND_SRE: u32 = 63502;
const SRE: u32 = 63503;
const SRE2: u32 = 63504;

/// `show` prints one variable of its environment, `MODE` set to `mode`.
fn policy(mode: &str) -> Policy {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT, AGENT_AND_SRE])
        .humans("sre", &[AGENT_AND_SRE, SRE, SRE2])
        .approvers(&["sre"])
        .verb(
            "count",
            Verb::builtin(Category::Mutating, "file.append", &["@DIR@/out"])
                .description("append a line to a counter file")
                .roles(&["agent", "sre"]),
        )
        .verb(
            "show",
            Verb::argv(Category::Mutating, &["/usr/bin/printenv", "{var}"])
                .description("print one variable of the verb's environment")
                .roles(&["agent"])
                .env("MODE", mode)
                .env("LEVEL", "low")
                .param("var", Param::matching("MODE|LEVEL")),
        )
}

fn start() -> Option<Daemon> {
    if !require_root("approvals_guards") {
        return None;
    }
    Some(Daemon::start_open(&policy("safe").render(), &["out"]))
}

/// `uid` calls `verb` with `args`; the call must become a proposal. Returns (id, hash).
fn propose(d: &Daemon, uid: u32, args: &[&str]) -> (u64, String) {
    let mut argv = vec!["--reason", "test"];
    argv.extend_from_slice(args);
    let proposed = d.propose_as(uid, &argv);
    (proposed.id, proposed.hash)
}

#[track_caller]
fn assert_refused(out: &std::process::Output, reason: &str) {
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(reason), "expected {reason:?}: {stderr}");
}

fn count_args(d: &Daemon, file: &str, content: &str) -> [String; 3] {
    [
        "count".to_owned(),
        format!("path={}", d.path("out").join(file).display()),
        format!("content={content}"),
    ]
}

#[test]
fn an_agent_listed_in_a_human_approver_role_still_never_approves() {
    let Some(d) = start() else { return };
    let args = count_args(&d, "agent", "x\n");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (id, hash) = propose(&d, AGENT, &args);
    // Not the requester, and in the approver role `sre`: only its agent role stops it.
    let out = d.approve_as(AGENT_AND_SRE, id, &hash[..12]);
    assert_refused(&out, "agent identities can never approve anything");
    assert_eq!(d.execs_of(id), 0);
    assert!(!d.path("out/agent").exists(), "the agent's approval ran it");
    // Control: a human approver approves the same proposal and it runs.
    let out = d.approve_as(SRE, id, &hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(id), 1);
    assert_eq!(std::fs::read_to_string(d.path("out/agent")).unwrap(), "x\n");
}

#[test]
fn nobody_approves_their_own_request_not_even_an_approver() {
    let Some(d) = start() else { return };
    let args = count_args(&d, "own", "mine\n");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (id, hash) = propose(&d, SRE, &args);
    let out = d.approve_as(SRE, id, &hash[..12]);
    assert_refused(&out, "nobody approves their own request");
    assert_eq!(d.execs_of(id), 0);
    assert!(!d.path("out/own").exists(), "the requester approved itself");
    // Control: another approver approves it.
    let out = d.approve_as(SRE2, id, &hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(id), 1);
    assert_eq!(
        std::fs::read_to_string(d.path("out/own")).unwrap(),
        "mine\n"
    );
}

#[test]
fn an_approval_is_bound_to_the_hash_of_its_own_arguments() {
    let Some(d) = start() else { return };
    let first = count_args(&d, "first", "one\n");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let second = count_args(&d, "second", "two\n");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let (one, one_hash) = propose(&d, AGENT, &first);
    let (two, two_hash) = propose(&d, AGENT, &second);
    assert_ne!(one_hash, two_hash);
    // The approver read proposal two; the hash it typed does not approve proposal one.
    let out = d.approve_as(SRE, one, &two_hash);
    assert_refused(&out, &format!("does not match proposal {one}"));
    assert_eq!(d.execs_of(one), 0);
    assert_eq!(d.execs_of(two), 0);
    assert!(!d.path("out/first").exists() && !d.path("out/second").exists());
    // Control: its own full hash approves exactly proposal one.
    let out = d.approve_as(SRE, one, &one_hash);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(one), 1);
    assert_eq!(d.execs_of(two), 0);
    assert_eq!(
        std::fs::read_to_string(d.path("out/first")).unwrap(),
        "one\n"
    );
    assert!(!d.path("out/second").exists());
}

#[test]
fn a_live_reload_that_changes_only_the_env_voids_a_pending_approval() {
    let Some(d) = start() else { return };
    let (voided, voided_hash) = propose(&d, AGENT, &["show", "var=MODE"]);
    d.write_policy(&policy("unsafe").render());
    let out = d.cli_as(SRE, &["reload"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = d.approve_as(SRE, voided, &voided_hash[..12]);
    assert_refused(&out, "the policy changed verb `show`");
    assert_eq!(d.execs_of(voided), 0, "the old approval ran the new env");
    // Control: a proposal made under the reloaded policy approves and runs with its env.
    let (fresh, fresh_hash) = propose(&d, AGENT, &["show", "var=LEVEL"]);
    let out = d.approve_as(SRE, fresh, &fresh_hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(fresh), 1);
    let out = d.cli_as(AGENT, &["result", &fresh.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "succeeded", "{v}");
    assert_eq!(v["result"]["stdout"], "low\n", "{v}");
}
