//! Invariant 4 edges tests/approvals/approvals.rs does not reach: the approval hash must be given with at
//! least 8 hex digits (an empty `--hash ""` would otherwise match every proposal), and a pending
//! proposal is re-checked against the policy a **live reload** (`verbd reload`, no restart)
//! swapped in: a changed template or a deleted verb voids the approval. Each has its control.
use crate::common;
use common::*;

const AGENT: u32 = 61830;
const SRE: u32 = 61831;

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [61830]
[roles.sre]
kind = "human"
uids = [61831]
[approvals]
approvers = ["sre"]

[verb.count]
description = "append a line to the counter file"
builtin = "file.append"
category = "mutating"
roles = ["agent"]
roots = ["@DIR@/out"]

[verb.nuke]
description = "pretend to delete a pod"
category = "destructive"
roles = ["agent"]
command = "/bin/echo deleted {name}"
dry_run = "/bin/echo would delete pod/{name}"
params.name = { type = "k8s-name" }
"#;

fn start() -> Option<Daemon> {
    if !require_root("approvals_recheck") {
        return None;
    }
    let d = Daemon::start_with(POLICY, |dir| {
        std::fs::create_dir(dir.join("out")).unwrap();
    });
    d.open_socket();
    Some(d)
}

fn propose(d: &Daemon, args: &[&str]) -> (u64, String) {
    let mut argv = vec!["call", "--json", "--reason", "test"];
    argv.extend_from_slice(args);
    let out = d.cli_as(AGENT, &argv);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["id"].as_u64().unwrap(),
        v["hash"].as_str().unwrap().to_string(),
    )
}

fn approve(d: &Daemon, id: u64, hash: &str) -> std::process::Output {
    d.cli_as(SRE, &["approve", &id.to_string(), "--hash", hash])
}

fn execs_of(d: &Daemon, id: u64) -> usize {
    d.journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec" && e["proposal"] == id)
        .count()
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
    assert_eq!(execs_of(&d, id), 0);
    assert!(!counter.exists(), "a short hash ran the proposal");
    // Control: exactly 8 correct digits approve and run it.
    let out = approve(&d, id, &hash[..8]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(execs_of(&d, id), 1);
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "x\n");
}

fn reload(d: &Daemon, policy: String) {
    std::fs::write(&d.policy, policy).unwrap();
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
    let changed = std::fs::read_to_string(&d.policy)
        .unwrap()
        .replace("/bin/echo deleted", "/bin/echo really-deleted");
    reload(&d, changed);
    let out = approve(&d, voided, &voided_hash[..12]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the policy changed verb `nuke`"),
        "{out:?}"
    );
    assert_eq!(execs_of(&d, voided), 0);
    // Control: a proposal of a verb the reload left alone still approves and runs.
    let out = approve(&d, kept, &kept_hash[..12]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(execs_of(&d, kept), 1);
}

#[test]
fn a_live_reload_that_deletes_the_verb_voids_a_pending_approval() {
    let Some(d) = start() else { return };
    let (id, hash) = propose(&d, &["nuke", "name=web-2"]);
    let text = std::fs::read_to_string(&d.policy).unwrap();
    let without = text[..text.find("[verb.nuke]").unwrap()].to_string();
    reload(&d, without);
    let out = approve(&d, id, &hash[..12]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("verb `nuke` no longer exists in the policy; the proposal cannot run"),
        "{out:?}"
    );
    assert_eq!(execs_of(&d, id), 0);
}

const HOSTILE: u32 = 63020;
const APPROVER: u32 = 63021;

/// A verb whose argv a reload can leave as it is while changing what the run gets: its
/// environment, its sandbox profile's content (same name), its category.
const RELOADED: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [63020]
[roles.sre]
kind = "human"
uids = [63021]
[approvals]
approvers = ["sre"]

[sandbox.box]
read = ["/usr", "/etc"]

[verb.stamp]
description = "print a word"
category = "destructive"
roles = ["agent"]
command = "/bin/echo {name}"
dry_run = "/bin/echo would echo {name}"
env = { MODE = "safe" }
sandbox = "box"
params.name = { type = "string", pattern = "[a-z]{1,8}" }
"#;

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
    let d = Daemon::start_with(RELOADED, |dir| {
        std::fs::create_dir(dir.join("out")).unwrap();
    });
    d.open_socket();
    let base = std::fs::read_to_string(&d.policy).unwrap();
    let out_dir = d.path("out").display().to_string();
    let changes: Vec<(&str, String)> = vec![
        ("env", base.replace("MODE = \"safe\"", "MODE = \"wild\"")),
        (
            "sandbox write roots",
            base.replace(
                "read = [\"/usr\", \"/etc\"]",
                &format!("read = [\"/usr\", \"/etc\"]\nwrite = [\"{out_dir}\"]"),
            ),
        ),
        (
            "sandbox network",
            base.replace(
                "read = [\"/usr\", \"/etc\"]",
                "read = [\"/usr\", \"/etc\"]\nnetwork = \"full\"",
            ),
        ),
        (
            "category",
            base.replace("category = \"destructive\"", "category = \"mutating\""),
        ),
        (
            "timeout",
            base.replace("sandbox = \"box\"", "sandbox = \"box\"\ntimeout = \"5m\""),
        ),
    ];
    let propose_as_hostile = |value: &str| -> (u64, String) {
        let out = d.cli_as(
            HOSTILE,
            &[
                "call",
                "--json",
                "--reason",
                "routine",
                "stamp",
                &format!("name={value}"),
            ],
        );
        assert_eq!(out.status.code(), Some(73), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["id"].as_u64().unwrap(),
            v["hash"].as_str().unwrap().to_string(),
        )
    };
    let reload_as_approver = |text: &str| {
        std::fs::write(&d.policy, text).unwrap();
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
        let out = d.cli_as(
            APPROVER,
            &["approve", &id.to_string(), "--hash", &hash[..12]],
        );
        let executed = execs_of(&d, id);
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
    reload_as_approver(&base.replace("print a word", "print one word"));
    let out = d.cli_as(
        APPROVER,
        &["approve", &id.to_string(), "--hash", &hash[..12]],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(execs_of(&d, id), 1);
}
