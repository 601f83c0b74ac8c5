//! `${secret_file:…}` copies belong to one call (issue 11, item 2's sibling: secret copies).
//!
//! The attack, as hostile uid 61460 against a real daemon: while one call holds its secret copy
//! (it prints the copy, then 5000 bytes so the fixed tail a timeout withholds
//! spares the copy, then sleeps with the file open until its timeout), a second verb of the same profile, running as the same
//! uid as the first child, looks for the copy everywhere it could be — the old secret directory
//! under the state dir (which the profile could list and read) and every `/proc/PID/fd/N` it can
//! see (the profile is even given `/proc`) — and reports how many readable files hold the
//! secret. The agent uid itself scans `/proc/*/fd/*` too. Positive control: the holding call's
//! own child reads its copy (its output is the redacted secret).
use crate::common;
use crate::hostile;

use common::harness::write_secret;
use common::policy::{Category, Policy, Sandbox, Secret, Verb};
use common::*;
use std::process::Command;
use std::time::Duration;
use verbd::protocol::Response;

const AGENT: u32 = 61460;
const SECRET: &str = "copy-secret-9c1e-Qx7Lw2Rt";

/// `hold` keeps its copy of the secret open; `peek`, of the same profile, runs `scan`.
fn policy(scan: &str) -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .sandbox(
            "kube",
            Sandbox::new(&["/usr", "/lib", "/etc", "/proc", "@DIR@"], &[]),
        )
        .verb(
            "hold",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/usr/bin/python3",
                    "-c",
                    "import sys, time\nf = open(sys.argv[1])\nprint(f.read().strip())\nprint('x' * 5000, flush=True)\ntime.sleep(10)",
                    "${secret_file:tok}",
                ],
            )
            .description("a tool that keeps its credential file open")
            .roles(&["agent"])
            .sandbox("kube")
            .timeout("4s")
            .allow_interpreter(),
        )
        .verb(
            "peek",
            Verb::argv(Category::ReadOnly, &["/usr/bin/python3", "-c", scan])
                .description("a second tool of the same profile")
                .roles(&["agent"])
                .sandbox("kube")
                .allow_interpreter(),
        )
        .render()
}

/// Counts readable files holding the secret (by its sha256: the output never carries it).
fn scan_script(state: &str) -> String {
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(SECRET.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "import glob, hashlib, os\n\
         me = '/proc/%d/' % os.getpid()\n\
         found = 0\n\
         for p in glob.glob('{state}/secret-files/*') + glob.glob('/proc/[0-9]*/fd/*'):\n\
         \x20   if p.startswith(me) or p.startswith('/proc/self/'):\n\
         \x20       continue\n\
         \x20   try:\n\
         \x20       data = open(p, 'rb').read(4096).strip()\n\
         \x20   except Exception:\n\
         \x20       continue\n\
         \x20   if hashlib.sha256(data).hexdigest() == '{digest}':\n\
         \x20       found += 1\n\
         print('found', found)\n"
    )
}

#[test]
fn a_concurrent_verb_cannot_read_another_calls_secret_copy() {
    if !require_root("secret_copies") {
        return;
    }
    let dir = open_tempdir();
    let state = dir.path().join("state");
    let script = scan_script(state.to_str().unwrap());
    write_secret(&dir.path().join("tok"), &format!("{SECRET}\n"));
    let d = Daemon::spawn_in(dir, &policy(&script), &[]);
    d.wait_ready();
    d.open_socket();

    let socket = d.socket.clone();
    let holder = std::thread::spawn(move || {
        hostile::requests_as(AGENT, &socket, &[hostile::call("hold", &[])])
    });
    std::thread::sleep(Duration::from_millis(1500));
    let peek =
        hostile::decode(&hostile::requests_as(AGENT, &d.socket, &[hostile::call("peek", &[])])[0]);
    // The agent uid, outside any sandbox, looks too.
    let outside = {
        use std::os::unix::process::CommandExt;
        Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(scan_script(state.to_str().unwrap()))
            .uid(AGENT)
            .gid(AGENT)
            .output()
            .unwrap()
    };
    let held = hostile::decode(&holder.join().unwrap()[0]);

    let peeked = stdout_of(&peek);
    let outside = String::from_utf8_lossy(&outside.stdout).into_owned();
    println!(
        "while `hold` had its copy open: a concurrent verb of the same profile: {}; the agent uid outside: {}",
        peeked.trim(),
        outside.trim()
    );
    // Positive control: the call's own child read its copy (redacted on the way out).
    match &held {
        Response::Ok { result, .. } => {
            assert!(result.stdout.contains("[REDACTED:tok]"), "{result:?}")
        }
        other => panic!("the holding call failed: {other:?}"),
    }
    assert_eq!(
        peeked.trim(),
        "found 0",
        "another call read the secret copy"
    );
    assert_eq!(
        outside.trim(),
        "found 0",
        "the agent uid read the secret copy"
    );
    assert!(
        !state.join("secret-files").exists(),
        "a secret directory exists"
    );
}
