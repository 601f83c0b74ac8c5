//! Path parameters are pinned: what the child opens is what was validated (issue 11, item 2).
//!
//! The attacks, as hostile uid 61450 against a real daemon (root here, like the daemon user in
//! production: it can read a file the agent cannot):
//! - swapping a regular file for a symlink to a daemon-only file in an agent-writable directory
//!   between validation and the child's open (`cat {path}` printed the daemon-only file);
//! - a new leaf under a symlinked directory (`data/lnk/new`, `lnk` → outside the root) was
//!   accepted and created outside the root;
//! - a symlinked directory given as a directory parameter;
//! - a file replaced after a proposal showed it and before it was approved.
//!
//! Each test also runs the positive control: the same verb on a regular file, a new leaf in a
//! real directory, a real directory.
mod common;
#[path = "common/hostile.rs"]
mod hostile;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;
use verbd::protocol::Response;

const AGENT: u32 = 61450;
const APPROVER: u32 = 61451;
const DAEMON_ONLY: &str = "daemon-only-marker-7f3a";

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [61450]
[roles.sre]
kind = "human"
uids = [61451]
[approvals]
approvers = ["sre"]
expires = "30m"

[sandbox.paths]
read = ["/usr", "/lib", "/etc", "@DIR@"]
write = ["@DIR@/data"]

[verb.show]
description = "print a file"
category = "read-only"
roles = ["agent"]
sandbox = "paths"
command = "/usr/bin/cat {path}"
params.path = { type = "path", roots = ["@DIR@/data"], must_exist = true }

[verb.create]
description = "create an empty file"
category = "read-only"
roles = ["agent"]
sandbox = "paths"
command = "/usr/bin/touch {path}"
params.path = { type = "path", roots = ["@DIR@/data"] }

[verb.listing]
description = "list a directory"
category = "read-only"
roles = ["agent"]
sandbox = "paths"
command = "/usr/bin/ls {dir}"
params.dir = { type = "path", roots = ["@DIR@/data"], must_exist = true }

[verb.show-approved]
description = "print a file after approval"
category = "mutating"
roles = ["agent"]
sandbox = "paths"
command = "/usr/bin/cat {path}"
params.path = { type = "path", roots = ["@DIR@/data"], must_exist = true }
"#;

fn start() -> Option<Daemon> {
    if !require_root("hostile_paths") {
        return None;
    }
    let d = Daemon::start_with(POLICY, |dir| {
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

/// Runs a shell-free swapper as the agent uid: `data/f` flips between a regular file and a
/// symlink to the daemon-only file (atomic renames) until `rounds` flips are done.
fn swapper(d: &Daemon, rounds: u32) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let data = d.path("data");
    let secret = d.path("private/secret.txt");
    let script = format!(
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
    );
    Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .uid(AGENT)
        .gid(AGENT)
        .spawn()
        .expect("python3 for the swapper")
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
    // Positive control: a new leaf in a real directory is created there, by name, relative to
    // the pinned directory.
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
    std::thread::sleep(Duration::from_millis(10));
}
