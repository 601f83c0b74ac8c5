//! Invariant 4 edges tests/approvals/approvals.rs does not reach: the approval hash must be given with at
//! least 8 hex digits (an empty `--hash ""` would otherwise match every proposal), and a pending
//! proposal is re-checked against the policy a **live reload** (`verbd reload`, no restart)
//! swapped in: a changed template or a deleted verb voids the approval. Each has its control.
use crate::common;
use common::policy::{Category, NetworkMode, Param, ParamType, Policy, Sandbox, Verb};
use common::*;

const AGENT: u32 = 61830;
const SRE: u32 = 61831;

/// `nuke` runs `program deleted {name}`; `with_nuke` false leaves it out.
fn policy(program: &str, with_nuke: bool) -> Policy {
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .verb(
            "count",
            Verb::builtin(Category::Mutating, "file.append", &["@DIR@/out"])
                .description("append a line to the counter file")
                .roles(&["agent"]),
        );
    if !with_nuke {
        return policy;
    }
    policy.verb(
        "nuke",
        Verb::command(
            Category::Destructive,
            &format!("{program} deleted {{name}}"),
        )
        .description("pretend to delete a pod")
        .dry_run("/bin/echo would delete pod/{name}")
        .roles(&["agent"])
        .param("name", Param::of(ParamType::K8sName)),
    )
}

fn start() -> Option<Daemon> {
    if !require_root("approvals_recheck") {
        return None;
    }
    Some(Daemon::start_open(
        &policy("/bin/echo", true).render(),
        &["out"],
    ))
}

fn propose(d: &Daemon, args: &[&str]) -> (u64, String) {
    let mut argv = vec!["--reason", "test"];
    argv.extend_from_slice(args);
    let proposed = d.propose_as(AGENT, &argv);
    (proposed.id, proposed.hash)
}

fn approve(d: &Daemon, id: u64, hash: &str) -> std::process::Output {
    d.approve_as(SRE, id, hash)
}

#[test]
fn the_approval_hash_needs_eight_hex_digits() {
    let Some(d) = start() else { return };
    let counter = d.path("out/counter");
    let path_arg = format!("path={}", counter.display());
    let (id, hash) = propose(&d, &["count", &path_arg, "content=x\n"]);
    for short in ["", "a", &hash[..7]] {
        let out = approve(&d, id, short);
        assert_eq!(out.status.code(), Some(77), "{short:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("give at least 8 hex digits"),
            "{short:?}: {stderr}"
        );
    }
    assert_eq!(d.execs_of(id), 0);
    assert!(!counter.exists(), "a short hash ran the proposal");
    // Control: exactly 8 correct digits approve and run it.
    let out = approve(&d, id, &hash[..8]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(id), 1);
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "x\n");
}

fn reload(d: &Daemon, policy: &Policy) {
    d.write_policy(&policy.render());
    let out = d.cli_as(SRE, &["reload"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_live_reload_that_changes_the_template_voids_a_pending_approval() {
    let Some(d) = start() else { return };
    let (voided, voided_hash) = propose(&d, &["nuke", "name=web-1"]);
    let (kept, kept_hash) = propose(
        &d,
        &[
            "count",
            &format!("path={}", d.path("out/c").display()),
            "content=y\n",
        ],
    );
    reload(&d, &policy("/bin/echo really-deleted", true));
    let out = approve(&d, voided, &voided_hash[..12]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the policy changed verb `nuke`"),
        "{out:?}"
    );
    assert_eq!(d.execs_of(voided), 0);
    // Control: a proposal of a verb the reload left alone still approves and runs.
    let out = approve(&d, kept, &kept_hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(kept), 1);
}

#[test]
fn a_live_reload_that_deletes_the_verb_voids_a_pending_approval() {
    let Some(d) = start() else { return };
    let (id, hash) = propose(&d, &["nuke", "name=web-2"]);
    reload(&d, &policy("/bin/echo", false));
    let out = approve(&d, id, &hash[..12]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("verb `nuke` no longer exists in the policy; the proposal cannot run"),
        "{out:?}"
    );
    assert_eq!(d.execs_of(id), 0);
}

const HOSTILE: u32 = 63020;
const APPROVER: u32 = 63021;

/// A verb whose argv a reload can leave as it is while changing what the run gets: its
/// environment, its sandbox profile's content (same name), its category.
fn reloaded(verb: Verb, sandbox: Sandbox) -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[HOSTILE])
        .humans("sre", &[APPROVER])
        .approvers(&["sre"])
        .sandbox("box", sandbox)
        .verb("stamp", verb)
        .render()
}

fn stamp(category: Category, mode: &str) -> Verb {
    Verb::command(category, "/bin/echo {name}")
        .description("print a word")
        .dry_run("/bin/echo would echo {name}")
        .roles(&["agent"])
        .env("MODE", mode)
        .sandbox("box")
        .param("name", Param::matching("[a-z]{1,8}"))
}

fn reads() -> Sandbox {
    Sandbox {
        read: Some(vec!["/usr".into(), "/etc".into()]),
        ..Sandbox::default()
    }
}

/// The hostile agent proposes, the policy is reloaded with a change the approver never saw,
/// and the approver approves the proposal as shown. For every change that is not visible in the
/// argv (so only the verb fingerprint can catch it), the approval must be refused and nothing
/// run. On the old code a changed sandbox profile (write access, network) and a changed
/// category were approved and ran; the environment change was caught only by the fingerprint
/// (with the check removed, it ran too). Control: a reload that changes only the description
/// keeps the approval good.
#[test]
fn a_reload_that_changes_what_runs_but_not_the_argv_voids_the_approval() {
    if !require_root("approvals_recheck") {
        return;
    }
    let base = reloaded(stamp(Category::Destructive, "safe"), reads());
    let d = Daemon::start_open(&base, &["out"]);
    let changes: Vec<(&str, String)> = vec![
        (
            "env",
            reloaded(stamp(Category::Destructive, "wild"), reads()),
        ),
        (
            "sandbox write roots",
            reloaded(
                stamp(Category::Destructive, "safe"),
                Sandbox {
                    write: Some(vec!["@DIR@/out".into()]),
                    ..reads()
                },
            ),
        ),
        (
            "sandbox network",
            reloaded(
                stamp(Category::Destructive, "safe"),
                Sandbox {
                    network: Some(NetworkMode::Full),
                    ..reads()
                },
            ),
        ),
        (
            "category",
            reloaded(stamp(Category::Mutating, "safe"), reads()),
        ),
        (
            "timeout",
            reloaded(stamp(Category::Destructive, "safe").timeout("5m"), reads()),
        ),
    ];
    let propose_as_hostile = |value: &str| -> (u64, String) {
        let name = format!("name={value}");
        let proposed = d.propose_as(HOSTILE, &["--reason", "routine", "stamp", &name]);
        (proposed.id, proposed.hash)
    };
    let reload_as_approver = |text: &str| {
        d.write_policy(text);
        let out = d.cli_as(APPROVER, &["reload"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    };
    let mut ran = Vec::new();
    for (index, (what, changed)) in changes.iter().enumerate() {
        assert_ne!(changed, &base, "{what}: the change did not apply");
        reload_as_approver(&base);
        let value = format!("v{}", "abcdefgh".chars().nth(index).unwrap());
        let (id, hash) = propose_as_hostile(&value);
        reload_as_approver(changed);
        let out = d.approve_as(APPROVER, id, &hash[..12]);
        let executed = d.execs_of(id);
        println!(
            "{what}: approve exit {:?}, {executed} exec record(s): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        if out.status.code() != Some(77) || executed != 0 {
            ran.push(*what);
        }
    }
    assert!(
        ran.is_empty(),
        "approved and ran after a reload changed: {ran:?}"
    );
    // Control: a change to the description alone leaves the approval good.
    reload_as_approver(&base);
    let (id, hash) = propose_as_hostile("control");
    reload_as_approver(&reloaded(
        stamp(Category::Destructive, "safe").description("print one word"),
        reads(),
    ));
    let out = d.approve_as(APPROVER, id, &hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(d.execs_of(id), 1);
}
