//! The self-test proves that every verb's program can start inside its profile (issue 14,
//! item 4): observed in a real confined child of the exact profile, not inferred from paths.
//!
//! A verb `/bin/echo` in a profile that reads only the program's directory (not its libraries),
//! and one in a profile that reads only the libraries (not the program), made the self-test pass
//! and the daemon serve verbs that could never run. Now the self-test fails naming the verb, the
//! profile and the missing access, and `verbd serve` refuses to start; the same verb in a profile
//! that covers both passes and runs (the positive control).
use crate::common;
use crate::hostile;

use common::policy::{Category, Policy, Sandbox, Verb};
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const AGENT: u32 = 61767;

/// `echo` for the agent, in the profile `probe`, which reads `read` alone.
fn policy(read: &[&str]) -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .sandbox("probe", Sandbox::new(read, &[]))
        .verb(
            "echo",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("says hello")
                .roles(&["agent"])
                .sandbox("probe"),
        )
        .render()
}

/// `verbd selftest` on `policy`: (exit code, stdout).
fn selftest(policy: &str) -> (Option<i32>, String) {
    let dir = open_tempdir();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, policy).unwrap();
    let out = Command::new(BIN)
        .args(["selftest", "--policy"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    (out.status.code(), stdout)
}

fn programs_line(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.contains("programs:probe"))
        .unwrap_or_else(|| panic!("no programs:probe line in\n{report}"))
}

#[test]
fn a_program_whose_libraries_the_profile_cannot_read_fails_the_self_test() {
    if !require_root("a_program_whose_libraries_the_profile_cannot_read_fails_the_self_test") {
        return;
    }
    let (code, report) = selftest(&policy(&["/usr/bin"]));
    assert_eq!(code, Some(1), "{report}");
    let line = programs_line(&report);
    assert!(line.starts_with("FAIL"), "{line}");
    for needle in [
        "verb `echo`",
        "profile `probe`",
        "libc.so.6",
        "cannot be read",
    ] {
        assert!(line.contains(needle), "{needle} in {line}");
    }
}

#[test]
fn a_program_the_profile_cannot_execute_fails_the_self_test() {
    if !require_root("a_program_the_profile_cannot_execute_fails_the_self_test") {
        return;
    }
    let (code, report) = selftest(&policy(&["/usr/lib", "/usr/lib64"]));
    assert_eq!(code, Some(1), "{report}");
    let line = programs_line(&report);
    assert!(line.starts_with("FAIL"), "{line}");
    for needle in ["verb `echo`", "/usr/bin/echo", "cannot be executed"] {
        assert!(line.contains(needle), "{needle} in {line}");
    }
}

#[test]
fn the_daemon_refuses_to_serve_a_verb_that_cannot_start_and_serves_one_that_can() {
    if !require_root("the_daemon_refuses_to_serve_a_verb_that_cannot_start") {
        return;
    }
    let mut d = Daemon::spawn_in(open_tempdir(), &policy(&["/usr/bin"]), &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the daemon served: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(78), "{}", d.log());
    assert!(d.log().contains("programs:probe"), "{}", d.log());

    // Control: with the libraries readable, the self-test passes and the verb runs.
    let good = policy(&["/usr/bin", "/usr/lib", "/usr/lib64"]);
    let (code, report) = selftest(&good);
    assert_eq!(code, Some(0), "{report}");
    assert!(programs_line(&report).starts_with("PASS"), "{report}");
    let d = Daemon::start(&good);
    d.open_socket();
    let answers = hostile::requests_as(AGENT, &d.socket, &[hostile::call("echo", &[])]);
    assert_eq!(stdout_of(&hostile::decode(&answers[0])), "hello\n");
}
