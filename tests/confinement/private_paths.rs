//! Children never read the daemon's own files (issue 11, item 3), whatever their profile says.
//!
//! The attack, as hostile uid 61764 against a real daemon: verbs whose profile reads the whole
//! test directory — which holds the policy, a secret source and the state directory (journal,
//! key, witness) — `cat` those files, by a fixed path and through a `path` parameter; the same
//! verbs read a file beside them (the positive control). A profile whose write root contains a
//! private path is refused at start, naming it. The self-test's canary proves on every start that
//! no private path is readable, and names the one it could read when the sandbox is off.
use crate::common;
use crate::hostile;

use common::policy::{Category, Param, Policy, Sandbox, Secret, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};
use verbd::protocol::Response;

const AGENT: u32 = 61764;
const SECRET: &str = "private-secret-value-5b1e";

/// Verbs of the profile `wide`, which reads the whole test directory: each `cat`s one file.
fn verbs() -> String {
    let wide = |description: &str, command: &str| {
        Verb::command(Category::ReadOnly, command)
            .description(description)
            .roles(&["agent"])
            .sandbox("wide")
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .secret("token", Secret::File("@DIR@/token".into()))
        .sandbox(
            "wide",
            Sandbox::new(&["/usr", "/lib", "/lib64", "/bin", "/etc", "@DIR@"], &[]),
        )
        .verb(
            "show",
            wide("print a file of the test directory", "/bin/cat {path}")
                .param("path", Param::path(&["@DIR@"])),
        )
        .verb(
            "cat-policy",
            wide("print the policy", "/bin/cat @DIR@/policy.toml"),
        )
        .verb(
            "cat-journal",
            wide("print the journal", "/bin/cat @DIR@/state/journal.jsonl"),
        )
        .verb(
            "cat-key",
            wide("print the journal key", "/bin/cat @DIR@/state/journal.key"),
        )
        .verb(
            "cat-secret",
            wide("print the secret source", "/bin/cat @DIR@/token"),
        )
        .verb(
            "list-state",
            wide("list the state directory", "/bin/ls @DIR@/state"),
        )
        .verb(
            "cat-notes",
            wide(
                "control: print a file beside them",
                "/bin/cat @DIR@/notes.txt",
            ),
        )
        .render()
}

fn setup(dir: &std::path::Path) {
    std::fs::write(dir.join("notes.txt"), "notes beside the policy\n").unwrap();
    std::fs::write(dir.join("token"), SECRET).unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn call(d: &Daemon, verb: &str, args: &[(&str, &str)]) -> Response {
    let answers = hostile::requests_as(AGENT, &d.socket, &[hostile::call(verb, args)]);
    hostile::decode(&answers[0])
}

/// (exit code, stdout, stderr) of a verb that ran.
fn ran(response: &Response) -> (Option<i32>, String, String) {
    match response {
        Response::Ok { result, .. } => (
            result.exit.code,
            result.stdout.clone(),
            result.stderr.clone(),
        ),
        other => panic!("expected a run, got {other:?}"),
    }
}

#[test]
fn verbs_cannot_read_the_policy_the_secrets_or_the_state_directory() {
    if !require_root("verbs_cannot_read_the_policy_the_secrets_or_the_state_directory") {
        return;
    }
    let d = Daemon::start_with(&verbs(), setup);
    d.open_socket();
    assert!(d.state.join("journal.jsonl").exists() && d.state.join("journal.key").exists());

    let (code, stdout, _) = ran(&call(&d, "cat-notes", &[]));
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "notes beside the policy\n")
    );
    let notes = d.path("notes.txt");
    let (code, stdout, _) = ran(&call(&d, "show", &[("path", notes.to_str().unwrap())]));
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "notes beside the policy\n"),
        "control through the path parameter"
    );

    for verb in [
        "cat-policy",
        "cat-journal",
        "cat-key",
        "cat-secret",
        "list-state",
    ] {
        let response = call(&d, verb, &[]);
        let (code, stdout, stderr) = ran(&response);
        println!("{verb}: exit {code:?}, stdout {stdout:?}, stderr {stderr:?}");
        assert_ne!(code, Some(0), "{verb} read a private path: {response:?}");
        assert!(stdout.is_empty(), "{verb}: {stdout}");
        assert!(stderr.contains("Permission denied"), "{verb}: {stderr}");
    }
    for file in [
        "policy.toml",
        "state/journal.jsonl",
        "state/journal.key",
        "token",
    ] {
        let path = d.path(file);
        let response = call(&d, "show", &[("path", path.to_str().unwrap())]);
        println!("show {file}: {response:?}");
        if let Response::Ok { result, .. } = &response {
            assert_ne!(result.exit.code, Some(0), "show {file}: {response:?}");
            assert!(result.stdout.is_empty(), "show {file}: {response:?}");
        }
    }
    assert!(!d.journal().contains(SECRET));
}

#[test]
fn a_write_root_over_a_private_path_is_refused_at_start() {
    if !require_root("a_write_root_over_a_private_path_is_refused_at_start") {
        return;
    }
    let policy = Policy::new()
        .allow_root()
        .sandbox("loose", Sandbox::writing(&["@DIR@"]))
        .render();
    let mut d = Daemon::spawn_in(open_tempdir(), &policy, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the daemon kept running");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = d.log();
    println!("{log}");
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(
        log.contains(&format!(
            "write root {:?} touches",
            d.dir.path().display().to_string()
        )) && log.contains("a private path of the daemon"),
        "{log}"
    );
    assert!(!d.socket.exists(), "a refused start left its socket");
}

#[test]
fn the_canary_proves_on_every_start_that_no_private_path_is_readable() {
    if !require_root("the_canary_proves_on_every_start_that_no_private_path_is_readable") {
        return;
    }
    let dir = open_tempdir();
    setup(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        verbs().replace("@DIR@", dir.path().to_str().unwrap()),
    )
    .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("journal.key"), "key").unwrap();
    let selftest = |unsandboxed: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args(["selftest", "--policy"])
            .arg(&policy)
            .arg("--state-dir")
            .arg(&state);
        if unsandboxed {
            cmd.env(verbd::selftest::UNSANDBOXED_CANARY_ENV, "1");
        }
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let confined = selftest(false);
    println!("{confined}");
    let wide = confined
        .lines()
        .find(|l| l.contains("sandbox:wide"))
        .unwrap_or_else(|| panic!("{confined}"));
    assert!(
        wide.starts_with("PASS") && wide.contains("private-paths"),
        "{wide}"
    );
    let unsandboxed = selftest(true);
    println!("{unsandboxed}");
    let wide = unsandboxed
        .lines()
        .find(|l| l.contains("sandbox:wide"))
        .unwrap_or_else(|| panic!("{unsandboxed}"));
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap().display().to_string();
    assert!(wide.starts_with("FAIL"), "{wide}");
    for path in [policy.clone(), dir.path().join("token"), state] {
        assert!(wide.contains(&real(&path)), "{} in {wide}", path.display());
    }
}
