//! Path parameters are pinned: what the child opens is what was validated (issue 11, item 2).
//!
//! The attacks, as hostile uid 61450 against a real daemon (root here, like the daemon user in
//! production: it can read a file the agent cannot):
//! - swapping a regular file for a symlink to a daemon-only file in an agent-writable directory
//!   between validation and the child's open (`cat {path}` printed the daemon-only file);
//! - a new leaf (`data/new`) flipped between absent and a symlink to the daemon-only file: the
//!   child was handed the pinned parent and the name, resolved the name itself and followed the
//!   symlink planted after the daemon's last look (printed the file in 11 of 200 calls);
//! - a new leaf under a symlinked directory (`data/lnk/new`, `lnk` → outside the root) was
//!   accepted and created outside the root;
//! - text after a path parameter (`cat {dir}/notes.txt`): the child resolved `notes.txt`, a
//!   symlink, unchecked (printed the daemon-only file);
//! - a second hard link to the daemon-only file inside the root (printed it);
//! - a directory swapped for a symlink (atomic exchange) while it is listed, and symlinks below
//!   a pinned directory (followed by the child, confined by Landlock);
//! - a file replaced after a proposal showed it and before it was approved.
//!
//! Each test also runs the positive control: the same verb on a regular file, a new file in a
//! real directory, a real directory.
use crate::common;
use crate::hostile;

use common::policy::{Category, Param, Policy, Sandbox, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use verbd::protocol::Response;

const AGENT: u32 = 61450;
const APPROVER: u32 = 61451;
const DAEMON_ONLY: &str = "daemon-only-marker-7f3a";

/// The agent's verbs on paths beneath `data`, one of them approved by `sre`.
fn policy() -> String {
    policy_asking_approval(true)
}

/// The policy; with `asks` false, `show-approved` runs without approval (a reload an operator
/// may make while proposals of it are pending).
fn policy_asking_approval(asks: bool) -> String {
    let data = ["@DIR@/data"];
    let path = || Param::path(&data);
    let on_paths = |category, description: &str, command: &str| {
        Verb::command(category, command)
            .description(description)
            .roles(&["agent"])
            .sandbox("paths")
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("sre", &[APPROVER])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .sandbox(
            "paths",
            Sandbox::new(&["/usr", "/lib", "/etc", "@DIR@"], &["@DIR@/data"]),
        )
        .sandbox(
            "data-only",
            Sandbox::new(&["/usr", "/lib", "/etc", "@DIR@/data"], &[]),
        )
        .verb(
            "show",
            on_paths(Category::ReadOnly, "print a file", "/usr/bin/cat {path}")
                .param("path", path()),
        )
        .verb(
            "peek-new",
            on_paths(
                Category::ReadOnly,
                "print a file, created empty if it does not exist",
                "/usr/bin/cat {path}",
            )
            .param("path", path().create()),
        )
        .verb(
            "create",
            on_paths(
                Category::ReadOnly,
                "create an empty file",
                "/usr/bin/touch {path}",
            )
            .param("path", path().create()),
        )
        .verb(
            "listing",
            on_paths(Category::ReadOnly, "list a directory", "/usr/bin/ls {dir}")
                .param("dir", path()),
        )
        .verb(
            "search",
            Verb::command(Category::ReadOnly, "/usr/bin/grep -R -h -e marker {dir}")
                .description(
                    "lines with `marker` in the files below a directory, following symlinks",
                )
                .roles(&["agent"])
                .sandbox("data-only")
                .param("dir", path()),
        )
        .verb("show-approved", {
            let verb = on_paths(
                Category::Mutating,
                "print a file after approval",
                "/usr/bin/cat {path}",
            )
            .param("path", path());
            if asks { verb } else { verb.without_approval() }
        })
        .render()
}

fn start() -> Option<Daemon> {
    if !require_root("hostile_paths") {
        return None;
    }
    let d = Daemon::start_with(&policy(), |dir| {
        let data = dir.join("data");
        std::fs::create_dir(&data).unwrap();
        // Exists when the sandbox is prepared (write roots are walked at load).
        std::fs::create_dir(data.join("sub")).unwrap();
        // The agent's own directory (as a workspace would be).
        std::os::unix::fs::chown(&data, Some(AGENT), Some(AGENT)).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let private = dir.join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let secret = private.join("secret.txt");
        std::fs::write(&secret, format!("{DAEMON_ONLY}\n")).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    });
    d.open_socket();
    Some(d)
}

/// Runs `script` (Python, no shell) as the agent uid: the agent's own process, racing the
/// daemon.
fn as_agent(script: String) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .uid(AGENT)
        .gid(AGENT)
        .spawn()
        .expect("python3 for the agent's swapper")
}

/// `data/f` flips between a regular file and a symlink to the daemon-only file (atomic renames)
/// until `rounds` flips are done.
fn swapper(d: &Daemon, rounds: u32) -> std::process::Child {
    let data = d.path("data");
    let secret = d.path("private/secret.txt");
    as_agent(format!(
        r#"
import os
data, secret = {data:?}, {secret:?}
for i in range({rounds}):
    tmp = os.path.join(data, ".swap")
    if i % 2:
        os.symlink(secret, tmp)
    else:
        with open(tmp, "w") as f:
            f.write("harmless\n")
    os.rename(tmp, os.path.join(data, "f"))
"#
    ))
}

#[test]
fn swapped_symlink_never_reaches_the_child() {
    let Some(d) = start() else { return };
    let file = d.path("data/f");
    std::fs::write(&file, "harmless\n").unwrap();
    std::os::unix::fs::chown(&file, Some(AGENT), Some(AGENT)).unwrap();
    let path = file.to_str().unwrap().to_string();

    // Positive control: a regular file is printed.
    let control = hostile::requests_as(
        AGENT,
        &d.socket,
        &[hostile::call("show", &[("path", &path)])],
    );
    assert_eq!(stdout_of(&hostile::decode(&control[0])), "harmless\n");

    let mut swapping = swapper(&d, 400_000);
    let requests: Vec<_> = (0..150)
        .map(|_| hostile::call("show", &[("path", &path)]))
        .collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let _ = swapping.kill();
    let _ = swapping.wait();
    let mut printed = 0;
    let mut refused_at_validation = 0;
    let mut refused_at_run = 0;
    let mut leaked = 0;
    for answer in &answers {
        match hostile::decode(answer) {
            Response::Ok { result, .. } if result.stdout.contains(DAEMON_ONLY) => leaked += 1,
            Response::Ok { result, .. } => {
                // cat may also race a rename and find nothing; it never prints the secret.
                if result.stdout == "harmless\n" {
                    printed += 1;
                }
            }
            Response::Invalid { rule, .. } => {
                assert!(
                    rule == "path-symlink-escape" || rule == "path-changed",
                    "{rule}"
                );
                refused_at_validation += 1;
            }
            Response::Error { message } => {
                assert!(
                    message.contains("path parameter") && message.contains("nothing was executed"),
                    "{message}"
                );
                refused_at_run += 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    println!(
        "150 racing calls: {printed} printed the regular file, {refused_at_validation} refused at validation, {refused_at_run} refused at run, {leaked} printed the daemon-only file"
    );
    assert_eq!(leaked, 0, "the child opened a file that was not validated");
    // The race was run: calls met the swap (the control above met the regular file).
    assert!(
        refused_at_validation + refused_at_run > 0,
        "no call ever met the symlink or a changed file: the swap did not race the calls"
    );
    assert!(
        !d.journal().contains(DAEMON_ONLY) && !d.log().contains(DAEMON_ONLY),
        "the daemon-only content reached the journal or log"
    );
}

#[test]
fn new_leaf_under_a_symlinked_directory_is_refused() {
    let Some(d) = start() else { return };
    let lnk = d.path("data/lnk");
    std::os::unix::fs::symlink(d.path("private"), &lnk).unwrap();

    let escape = d.path("data/lnk/new");
    let good = d.path("data/sub/new");
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call("create", &[("path", escape.to_str().unwrap())]),
            hostile::call("create", &[("path", good.to_str().unwrap())]),
        ],
    );
    let refused = hostile::decode(&answers[0]);
    println!("data/lnk/new (lnk -> private): {refused:?}");
    match &refused {
        Response::Invalid { param, rule, .. } => {
            assert_eq!(param.as_deref(), Some("path"));
            assert_eq!(rule, "path-symlink-escape");
        }
        other => panic!("expected path-symlink-escape, got {other:?}"),
    }
    assert!(
        !d.path("private/new").exists(),
        "a file was created outside the root"
    );
    // Positive control: a new leaf in a real directory is created there (by the daemon, beneath
    // the pinned directory) and handed to the child as that file.
    match hostile::decode(&answers[1]) {
        Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0), "{result:?}"),
        other => panic!("expected the new leaf to be created, got {other:?}"),
    }
    assert!(good.is_file(), "the new leaf is not where it was validated");
}

#[test]
fn directories_are_pinned_and_symlinked_ones_refused() {
    let Some(d) = start() else { return };
    std::fs::write(d.path("data/sub/inside.txt"), "x").unwrap();
    std::os::unix::fs::symlink(d.path("private"), d.path("data/privlink")).unwrap();
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call("listing", &[("dir", d.path("data/sub").to_str().unwrap())]),
            hostile::call(
                "listing",
                &[("dir", d.path("data/privlink").to_str().unwrap())],
            ),
        ],
    );
    assert_eq!(stdout_of(&hostile::decode(&answers[0])), "inside.txt\n");
    match hostile::decode(&answers[1]) {
        Response::Invalid { rule, .. } => assert_eq!(rule, "path-symlink-escape"),
        other => panic!("expected path-symlink-escape, got {other:?}"),
    }
}

#[test]
fn approval_shows_the_resolution_and_a_changed_file_is_refused() {
    let Some(d) = start() else { return };
    let file = d.path("data/g");
    std::fs::write(&file, "approved content\n").unwrap();
    let path = file.to_str().unwrap().to_string();
    let propose = || match hostile::decode(
        &hostile::requests_as(
            AGENT,
            &d.socket,
            &[hostile::call("show-approved", &[("path", &path)])],
        )[0],
    ) {
        Response::ConfirmRequired { id, hash, .. } => (id, hash),
        other => panic!("expected a proposal, got {other:?}"),
    };
    let approve = |id: u64, hash: &str| {
        d.cli_as(
            APPROVER,
            &["approve", &id.to_string(), "--hash", &hash[..12]],
        )
    };

    // Positive control: unchanged, the approved run prints the file.
    let (id, hash) = propose();
    let pending = String::from_utf8_lossy(&d.cli_as(APPROVER, &["pending"]).stdout).into_owned();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&file).unwrap());
    assert!(
        pending.contains(&format!("{path} → file (device "))
            && pending.contains(&format!("inode {inode})")),
        "the approver does not see what the path resolves to:\n{pending}"
    );
    let out = approve(id, &hash);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("approved content"),
        "{out:?}"
    );

    // The attack: the agent replaces the file after the approver saw it.
    let (id, hash) = propose();
    let replacement = d.path("data/g.new");
    std::fs::write(&replacement, "something else\n").unwrap();
    std::fs::rename(&replacement, &file).unwrap();
    let out = approve(id, &hash);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("approve after the swap: {}", text.trim());
    assert!(!text.contains("something else"), "{text}");
    assert!(
        text.contains("no longer resolves to what was shown"),
        "{text}"
    );
}

#[test]
fn an_approval_after_a_reload_that_dropped_the_approval_runs_only_what_was_shown() {
    let Some(mut d) = start() else { return };
    // Two files, so two proposals (the same call proposed again is the same proposal).
    let [kept_file, swapped_file] = ["data/h1", "data/h2"].map(|name| d.path(name));
    for file in [&kept_file, &swapped_file] {
        std::fs::write(file, "approved content\n").unwrap();
    }
    let propose = |file: &std::path::Path| match hostile::decode(
        &hostile::requests_as(
            AGENT,
            &d.socket,
            &[hostile::call(
                "show-approved",
                &[("path", file.to_str().unwrap())],
            )],
        )[0],
    ) {
        Response::ConfirmRequired { id, hash, .. } => (id, hash),
        other => panic!("expected a proposal, got {other:?}"),
    };
    let (kept, kept_hash) = propose(&kept_file);
    let (swapped, swapped_hash) = propose(&swapped_file);
    // The operator drops the approval from the verb (nothing else of it changes, so its
    // fingerprint stands): the pending proposals are now calls the policy would run at once.
    d.write_policy(&policy_asking_approval(false));
    d.respawn();
    d.open_socket();
    let approve = |id: u64, hash: &str| {
        let out = d.cli_as(
            APPROVER,
            &["approve", &id.to_string(), "--hash", &hash[..12]],
        );
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    // Positive control: unchanged, the approval runs the call that was shown.
    let text = approve(kept, &kept_hash);
    assert!(text.contains("approved content"), "{text}");
    // The attack: the file the approver saw is replaced before the second approval.
    let replacement = d.path("data/h2.new");
    std::fs::write(&replacement, "something else\n").unwrap();
    std::fs::rename(&replacement, &swapped_file).unwrap();
    let text = approve(swapped, &swapped_hash);
    println!("approve after the reload and the swap: {}", text.trim());
    assert!(!text.contains("something else"), "{text}");
    assert!(
        text.contains("no longer resolves to what was shown"),
        "{text}"
    );
}

/// How one racing call ended.
#[derive(Debug, Default)]
struct RaceTally {
    /// The child printed the daemon-only file.
    leaked: usize,
    /// The child ran on what was checked.
    ran: usize,
    /// Refused because a symlink was there (at validation, or when pinned again at run time).
    met_the_symlink: usize,
    /// Refused because nothing was there (a parameter without `create`).
    met_nothing: usize,
    /// Refused at run time because the entry changed or appeared since the check.
    changed: usize,
}

impl RaceTally {
    fn count(&mut self, response: Response) {
        match response {
            Response::Ok { result, .. } if result.stdout.contains(DAEMON_ONLY) => self.leaked += 1,
            Response::Ok { .. } => self.ran += 1,
            Response::Invalid { rule, .. } if rule == "path-symlink-escape" => {
                self.met_the_symlink += 1
            }
            Response::Invalid { rule, .. } if rule == "path-exists" => self.met_nothing += 1,
            Response::Invalid { rule, .. } if rule == "path-changed" => self.changed += 1,
            Response::Error { message } if message.contains("passes through a symlink") => {
                self.met_the_symlink += 1
            }
            Response::Error { message }
                if message.contains("appeared after the call was checked")
                    || message.contains("now resolves to") =>
            {
                self.changed += 1
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
}

#[test]
fn a_new_leaf_raced_into_a_symlink_never_reaches_the_child() {
    let Some(d) = start() else { return };
    let leaf = d.path("data/new");
    let path = leaf.to_str().unwrap().to_string();
    let secret = d.path("private/secret.txt");

    // Positive control: a new file is created empty and handed over; a parameter without
    // `create` refuses a name that does not exist.
    let control = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call("show", &[("path", &path)]),
            hostile::call("peek-new", &[("path", &path)]),
        ],
    );
    match hostile::decode(&control[0]) {
        Response::Invalid { rule, .. } => assert_eq!(rule, "path-exists"),
        other => panic!("a new name without `create` was accepted: {other:?}"),
    }
    assert_eq!(stdout_of(&hostile::decode(&control[1])), "");
    assert!(leaf.is_file(), "the new file is not where it was checked");
    std::fs::remove_file(&leaf).unwrap();

    // The attack: `data/new` flips between absent and a symlink to the daemon-only file. At full
    // speed the swapper also unlinks the file a `create` call made, so on a loaded machine no
    // such call may get to run; each further round holds each state a little longer, until every
    // path below was raced (at most six rounds of 150 pairs; every round's calls are counted).
    let (mut without_create, mut with_create) = (RaceTally::default(), RaceTally::default());
    for dwell in ["0", "0.0002", "0.0005", "0.001", "0.002", "0.005"] {
        let mut swapping = as_agent(format!(
            r#"
import os, time
leaf, secret, dwell = {leaf:?}, {secret:?}, {dwell}
for i in range(3000000):
    try:
        os.symlink(secret, leaf)
    except FileExistsError:
        pass
    if dwell:
        time.sleep(dwell)
    try:
        os.unlink(leaf)
    except FileNotFoundError:
        pass
    if dwell:
        time.sleep(dwell)
"#
        ));
        let requests: Vec<_> = (0..150)
            .flat_map(|_| {
                [
                    hostile::call("show", &[("path", &path)]),
                    hostile::call("peek-new", &[("path", &path)]),
                ]
            })
            .collect();
        let answers = hostile::requests_as(AGENT, &d.socket, &requests);
        let _ = swapping.kill();
        let _ = swapping.wait();
        for pair in answers.chunks(2) {
            without_create.count(hostile::decode(&pair[0]));
            with_create.count(hostile::decode(&pair[1]));
        }
        println!("after the round with dwell {dwell} s: without `create` {without_create:?}");
        println!("after the round with dwell {dwell} s: with `create` {with_create:?}");
        if without_create.met_nothing > 0 && with_create.ran > 0 {
            break;
        }
    }
    assert_eq!(
        without_create.leaked + with_create.leaked,
        0,
        "the child followed a symlink planted at a new name after the check"
    );
    // The race was run: calls met the symlink, and calls met the absent name.
    assert!(
        without_create.met_the_symlink + with_create.met_the_symlink > 0,
        "no call ever met the symlink: the swap did not race the calls"
    );
    assert!(
        without_create.met_nothing > 0,
        "no call ever met the absent name"
    );
    assert!(
        with_create.ran > 0,
        "no call with `create` ever ran: the new-file path was not exercised"
    );
    assert!(
        !d.journal().contains(DAEMON_ONLY) && !d.log().contains(DAEMON_ONLY),
        "the daemon-only content reached the journal or log"
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_never_reaches_the_child() {
    let Some(d) = start() else { return };
    let dir = d.path("data/d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("harmless.txt"), "x").unwrap();
    std::os::unix::fs::chown(&dir, Some(AGENT), Some(AGENT)).unwrap();
    let alternate = d.path("data/alt");
    std::os::unix::fs::symlink(d.path("private"), &alternate).unwrap();
    let path = dir.to_str().unwrap().to_string();

    // `data/d` and `data/alt` (a symlink to the daemon-only directory) trade places atomically,
    // over and over (renameat2 RENAME_EXCHANGE: the name never goes missing).
    let mut swapping = as_agent(format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode({dir:?}), os.fsencode({alternate:?})
for i in range(3000000):
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
"#
    ));
    let requests: Vec<_> = (0..150)
        .map(|_| hostile::call("listing", &[("dir", &path)]))
        .collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let _ = swapping.kill();
    let _ = swapping.wait();
    let (mut listed, mut leaked, mut refused) = (0, 0, 0);
    for answer in &answers {
        match hostile::decode(answer) {
            Response::Ok { result, .. } if result.stdout.contains("secret.txt") => leaked += 1,
            Response::Ok { result, .. } => {
                assert_eq!(result.stdout, "harmless.txt\n", "{result:?}");
                listed += 1;
            }
            Response::Invalid { rule, .. } => {
                assert!(
                    rule == "path-symlink-escape" || rule == "path-changed",
                    "{rule}"
                );
                refused += 1;
            }
            Response::Error { message } => {
                assert!(
                    message.contains("path parameter") && message.contains("nothing was executed"),
                    "{message}"
                );
                refused += 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    println!(
        "150 racing listings: {listed} listed the real directory, {refused} refused, {leaked} listed the daemon-only directory"
    );
    assert_eq!(
        leaked, 0,
        "the child listed a directory that was not validated"
    );
    assert!(refused > 0, "no call ever met the symlink");
    assert!(listed > 0, "no call ever met the real directory");
}

#[test]
fn below_a_pinned_directory_the_child_follows_symlinks_only_as_far_as_landlock_allows() {
    let Some(d) = start() else { return };
    let dir = d.path("data/notes");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("mine.txt"), "agent marker line\n").unwrap();
    // The agent plants a symlink inside the directory it names: pinning does not judge names
    // below the pinned entry; the child resolves them, inside its Landlock roots (`data-only`
    // reads @DIR@/data and the system, not @DIR@/private).
    std::os::unix::fs::symlink(d.path("private/secret.txt"), dir.join("planted.txt")).unwrap();
    let answer = hostile::decode(
        &hostile::requests_as(
            AGENT,
            &d.socket,
            &[hostile::call("search", &[("dir", dir.to_str().unwrap())])],
        )[0],
    );
    println!("grep -R below the pinned directory: {answer:?}");
    let Response::Ok { result, .. } = answer else {
        panic!("the search did not run: {answer:?}")
    };
    assert!(!result.stdout.contains(DAEMON_ONLY), "{result:?}");
    assert_eq!(result.stdout, "agent marker line\n", "positive control");
    assert!(
        result.stderr.contains("planted.txt: Permission denied"),
        "the child was not stopped by Landlock at the planted symlink: {result:?}"
    );
}

#[test]
fn a_second_hard_link_to_a_file_is_refused() {
    let Some(d) = start() else { return };
    // With fs.protected_hardlinks = 0 an agent can link any file it can see into its own
    // directory; root makes the link here, in the agent's place.
    let linked = d.path("data/linked");
    std::fs::hard_link(d.path("private/secret.txt"), &linked).unwrap();
    let own = d.path("data/own.txt");
    std::fs::write(&own, "the agent's own\n").unwrap();
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call("show", &[("path", linked.to_str().unwrap())]),
            hostile::call("show", &[("path", own.to_str().unwrap())]),
        ],
    );
    let refused = hostile::decode(&answers[0]);
    println!("a hard link to the daemon-only file: {refused:?}");
    match refused {
        Response::Invalid { rule, message, .. } => {
            assert_eq!(rule, "path-hardlink");
            assert!(message.contains("has 2 hard links"), "{message}");
        }
        other => panic!("a hard-linked file was accepted: {other:?}"),
    }
    assert_eq!(
        stdout_of(&hostile::decode(&answers[1])),
        "the agent's own\n"
    );
}

#[test]
fn a_new_file_is_never_created_under_a_protected_name() {
    let Some(d) = start() else { return };
    let planted = d.path("data/sub/.bashrc");
    let answer = hostile::decode(
        &hostile::requests_as(
            AGENT,
            &d.socket,
            &[hostile::call(
                "create",
                &[("path", planted.to_str().unwrap())],
            )],
        )[0],
    );
    println!("create data/sub/.bashrc: {answer:?}");
    let refusal = match &answer {
        Response::Error { message } => message.clone(),
        Response::Invalid { message, .. } => message.clone(),
        other => panic!("a protected name was created: {other:?}"),
    };
    assert!(refusal.contains("protected name `.bashrc`"), "{refusal}");
    assert!(!planted.exists(), "the protected file was created");
}

/// `verbd policy check` of a policy with one verb, `show-config` (the rest of its body given),
/// and a profile `out` that writes `data/out`: (passed, stderr).
fn check_policy(verb_body: &str) -> (bool, String) {
    let dir = open_tempdir();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("out")).unwrap();
    let policy = dir.path().join("policy.toml");
    let text = format!(
        r#"
version = 1
[roles.agent]
uids = [61450]
[sandbox.out]
write = ["@DIR@/data/out"]
[verb.show-config]
description = "print a directory's notes"
roles = ["agent"]
{verb_body}
"#
    );
    std::fs::write(&policy, text.replace("@DIR@", dir.path().to_str().unwrap())).unwrap();
    let out = Command::new(BIN)
        .args(["policy", "check"])
        .arg(&policy)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn text_after_a_path_parameter_is_refused_at_load() {
    let with_command = |command: &str| {
        check_policy(&format!(
            "category = \"read-only\"\ncommand = {command:?}\nparams.dir = {{ type = \"path\", roots = [\"@DIR@/data\"] }}"
        ))
    };
    // `cat {dir}/notes.txt` once printed the daemon-only file through a `notes.txt` symlink:
    // the child resolved the suffix itself.
    for (command, said) in [
        (
            "/usr/bin/cat {dir}/notes.txt",
            "verb `show-config`: the command element \"{dir}/notes.txt\": text after path parameter `dir`",
        ),
        (
            "/usr/bin/cat /mnt{dir}",
            "verb `show-config`: the command element \"/mnt{dir}\": text before path parameter `dir`",
        ),
    ] {
        let (ok, stderr) = with_command(command);
        println!("{command}: {}", stderr.trim());
        assert!(!ok && stderr.contains(said), "{command}: {stderr}");
    }
    // Positive control: the whole element, or after an option's `=`.
    for command in ["/usr/bin/cat {dir}", "/usr/bin/cat --file={dir}"] {
        let (ok, stderr) = with_command(command);
        assert!(ok, "{command}: {stderr}");
    }
}

#[test]
fn new_files_only_where_the_profile_writes_and_never_in_a_dry_run() {
    let refused = [
        (
            "must_exist = false",
            r#"category = "mutating"
command = "/usr/bin/touch {dir}"
params.dir = { type = "path", roots = ["@DIR@/data/out"], must_exist = false }"#,
            "`must_exist = false` no longer lets a path name a new entry",
        ),
        (
            "create outside the write roots",
            r#"category = "mutating"
sandbox = "out"
command = "/usr/bin/touch {dir}"
params.dir = { type = "path", roots = ["@DIR@/data"], create = true }"#,
            "parameter `dir` creates files under",
        ),
        (
            "create in a dry run",
            r#"category = "destructive"
sandbox = "out"
command = "/usr/bin/touch {dir}"
dry_run = "/usr/bin/ls {dir}"
params.dir = { type = "path", roots = ["@DIR@/data/out"], create = true }"#,
            "so it cannot reach the dry run",
        ),
    ];
    for (case, body, said) in refused {
        let (ok, stderr) = check_policy(body);
        println!("{case}: {}", stderr.trim());
        assert!(!ok && stderr.contains(said), "{case}: {stderr}");
    }
    // Positive control: a new file inside the profile's write root.
    let (ok, stderr) = check_policy(
        r#"category = "mutating"
sandbox = "out"
command = "/usr/bin/touch {dir}"
params.dir = { type = "path", roots = ["@DIR@/data/out"], create = true }"#,
    );
    assert!(ok, "{stderr}");
}
