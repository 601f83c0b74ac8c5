//! The daemon end to end: identity from the kernel (invariant 3), role scoping, timeouts that kill
//! whole process groups, output caps, limits and concurrency, fail-closed journaling (invariant 6),
//! and policy errors with their locations.
use crate::common;
use crate::hostile;
use common::policy::{Category, Param, Policy, Sandbox, Verb};
use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};
use verbd::protocol::{self, Request, Response};

/// The verbs every test here calls, with the daemon's limits; who the daemon runs as is left
/// to [`policy`] and the test that drops privileges.
fn verbs() -> Policy {
    Policy::new()
        .max_executions(50)
        .queue_timeout("1s")
        .agents("me", &[0])
        .agents("agent", &[61001])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("for the agent")
                .roles(&["agent", "me"]),
        )
        .verb(
            "private",
            Verb::command(Category::ReadOnly, "/bin/echo private")
                .description("root only")
                .roles(&["me"]),
        )
        .verb(
            "forky",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    "echo started-{tag}; printf '%05000d' 0; sleep 4242.{tag} & sleep 4242.{tag} & sleep 4242.{tag}",
                    "forky",
                ],
            )
            .description("a child that leaves grandchildren behind, past its timeout")
            .roles(&["me"])
            .allow_interpreter()
            .timeout("1s")
            .param("tag", Param::int(1, 999999)),
        )
        .sandbox(
            "zero",
            Sandbox::new(&["/usr", "/lib", "/etc", "/dev/zero"], &[]),
        )
        .verb(
            "flood",
            Verb::command(Category::ReadOnly, "/usr/bin/head -c 100000000 /dev/zero")
                .description("writes 100 MB to stdout")
                .roles(&["me"])
                .sandbox("zero")
                .max_output("1MiB")
                .timeout("60s"),
        )
        .verb(
            "slow",
            Verb::command(Category::ReadOnly, "/bin/sleep {secs}")
                .description("sleeps")
                .roles(&["me"])
                .timeout("60s")
                .max_concurrent(1)
                .param("secs", Param::matching(r"[0-9]{1,3}(\.[0-9]{1,3})?")),
        )
        .verb(
            "change",
            Verb::command(Category::Mutating, "/bin/echo changed")
                .description("mutating")
                .roles(&["me"]),
        )
}

/// The daemon as the tests start it: as root, allowed to stay root.
fn policy() -> String {
    verbs().allow_root().render()
}

#[test]
fn caller_without_role_is_refused_and_with_role_sees_only_its_verbs() {
    if !require_root("roles") {
        return;
    }
    let d = Daemon::start(&policy());
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let as_uid = |uid: u32, args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("VERBD_SOCKET", &d.socket)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    };
    // 61000: no role.
    let out = as_uid(61000, &["call", "hello"]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uid 61000") && err.contains("matches no role"),
        "{err}"
    );
    assert!(d.journal().contains("\"kind\":\"connect_refused\""));
    assert!(d.journal().contains("\"uid\":61000"));
    // 61001: the agent role.
    let out = as_uid(61001, &["call", "hello"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let out = as_uid(61001, &["call", "private"]);
    assert_eq!(out.status.code(), Some(77));
    let out = as_uid(61001, &["list", "--json"]);
    let verbs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = verbs
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello"]);
    // The journal recorded the kernel's uid, not anything the client said.
    assert!(d.journal().contains("\"uid\":61001"));
}

#[test]
fn identity_claims_in_requests_are_refused() {
    if !require_root("identity claims") {
        return;
    }
    let d = Daemon::start(&policy());
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"{\"v\":1,\"op\":\"call\",\"verb\":\"hello\",\"uid\":61001}\n")
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let r = Response::decode(buf.as_bytes()).unwrap();
    assert!(
        matches!(r, Response::Error { ref message } if message.contains("unknown field")),
        "{r:?}"
    );
}

#[test]
fn timeout_kills_the_whole_process_group() {
    if !require_root("timeout") {
        return;
    }
    let d = Daemon::start(&policy());
    let tag = (std::process::id() % 999_999 + 1).to_string();
    let started = Instant::now();
    let r = d.call("forky", &[("tag", &tag)]);
    match &r {
        Response::Ok { result, .. } => {
            assert!(result.exit.timed_out, "{r:?}");
            // Output written before the timeout is kept, except the fixed tail withheld at
            // every cut (docs/protocol.md, "Cut output").
            let tail = verbd::scrub::CUT_WITHHELD_TAIL;
            assert!(result.stdout_truncated, "a timeout is a cut");
            assert_eq!(result.stdout_withheld, tail as u64);
            assert_eq!(
                result.stdout,
                format!("started-{tag}\n{}", "0".repeat(5000 - tail))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let left = processes_matching(&format!("sleep 4242.{tag}"));
    assert!(left.is_empty(), "grandchildren survived: {left:?}");
}

#[test]
fn output_cap_truncates_without_hanging_or_buffering_everything() {
    if !require_root("output cap") {
        return;
    }
    let d = Daemon::start(&policy());
    let r = d.call("flood", &[]);
    match &r {
        Response::Ok { result, .. } => {
            assert!(result.stdout_truncated);
            // The cap, minus the tail withheld at every cut.
            assert_eq!(
                result.stdout.len() + verbd::scrub::CUT_WITHHELD_TAIL,
                1 << 20
            );
            assert_eq!(
                result.stdout_withheld,
                verbd::scrub::CUT_WITHHELD_TAIL as u64
            );
            assert_eq!(
                result.exit.code,
                Some(0),
                "the child finished writing: it never blocked"
            );
        }
        other => panic!("{other:?}"),
    }
    // The daemon kept at most the cap: its resident memory stays far below 100 MB.
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    assert!(hwm_kb < 60_000, "daemon peak RSS {hwm_kb} kB");
    assert!(d.journal().contains("\"bytes\":100000000"));
}

#[test]
fn non_read_only_verbs_never_run_without_approval() {
    if !require_root("approval gate") {
        return;
    }
    let d = Daemon::start(&policy());
    match d.call("change", &[]) {
        Response::Denied { reason } => assert!(reason.contains("approval"), "{reason}"),
        Response::ConfirmRequired { .. } => {}
        other => panic!("a mutating verb ran or was mis-answered: {other:?}"),
    }
    let ran = d
        .journal_events()
        .iter()
        .any(|e| e["kind"] == "exec" && e["verb"] == "change");
    assert!(!ran, "the journal shows an execution of a mutating verb");
}

#[test]
fn busy_after_the_queue_deadline_and_disconnect_kills_the_child() {
    if !require_root("busy") {
        return;
    }
    let d = Daemon::start(&policy());
    // One `slow` at a time: a second concurrent call waits its turn for `queue_timeout` (1 s),
    // then is refused as busy, naming the limit.
    let mut first = UnixStream::connect(&d.socket).unwrap();
    first
        .write_all(&protocol::encode_request(&Request::Call {
            verb: "slow".into(),
            args: [("secs".to_string(), serde_json::json!("31.337"))].into(),
            reason: None,
            idempotency_key: None,
            stream: None,
        }))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_matching("sleep 31.337").is_empty() {
        assert!(Instant::now() < deadline, "slow verb never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let queued = Instant::now();
    match d.call("slow", &[("secs", "0.1")]) {
        Response::Busy { message } => assert!(
            message.contains("`slow`")
                && message.contains("max_concurrent")
                && message.contains("daemon.queue_timeout"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        queued.elapsed() >= Duration::from_secs(1),
        "busy before the queue deadline"
    );
    // The client goes away: its child's process group is killed, nothing orphaned.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_matching("sleep 31.337").is_empty() {
        assert!(
            Instant::now() < deadline,
            "child orphaned after client disconnect"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_hundred_connections_with_ten_stalled_all_finish() {
    if !require_root("concurrency") {
        return;
    }
    let d = Daemon::start(&policy());
    // Ten clients that send half a request and then stall.
    let stalled: Vec<UnixStream> = (0..10)
        .map(|_| {
            let mut s = UnixStream::connect(&d.socket).unwrap();
            s.write_all(b"{\"v\":1,\"op\":\"ca").unwrap();
            s
        })
        .collect();
    let started = Instant::now();
    let handles: Vec<_> = (0..200)
        .map(|_| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                let r = verbd::client::request(
                    &socket,
                    &Request::Call {
                        verb: "hello".into(),
                        args: Default::default(),
                        reason: None,
                        idempotency_key: None,
                        stream: None,
                    },
                    Duration::from_secs(60),
                )
                .unwrap();
                match r {
                    Response::Ok { result, .. } => {
                        assert_eq!(result.stdout, "hello\n");
                        true
                    }
                    // Over root's connection limit (daemon.max_connections_per_uid): at once.
                    Response::Busy { .. } => false,
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    let ok = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&ok| ok)
        .count();
    assert!(ok > 0, "every one of 200 calls was Busy");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "stalled clients held up the others: {:?}",
        started.elapsed()
    );
    // No execution permit leaked: calls one at a time all run afterwards.
    for _ in 0..5 {
        assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    }
    drop(stalled);
}

#[test]
fn policy_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let check = |p: &std::path::Path| {
        let out = Command::new(BIN)
            .args(["policy", "check"])
            .arg(p)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let typo = write(
        "typo.toml",
        "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncomand = \"/bin/true\"\n",
    );
    let (code, err) = check(&typo);
    assert_eq!(code, Some(1));
    assert!(err.contains("typo.toml:6:1"), "{err}");
    assert!(err.contains("comand"), "{err}");

    let shell = write(
        "shell.toml",
        "version = 1\n[roles.a]\nuids = [1]\n\n[verb.x]\ncategory = \"read-only\"\nroles = [\"a\"]\ncommand = \"/bin/bash -c {cmd}\"\nparams.cmd = { type = \"string\", pattern = \".*\" }\n",
    );
    let (code, err) = check(&shell);
    assert_eq!(code, Some(1));
    assert!(err.contains("shell.toml:8:"), "{err}");
    assert!(err.contains("shell/interpreter"), "{err}");

    for (name, text, needle) in [
        (
            "undeclared.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/bin/echo {nope}\"\n",
            "no parameter `nope` is declared",
        ),
        (
            "unused.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/bin/echo\"\nparams.p = { type = \"int\", min = 1, max = 2 }\n",
            "never used",
        ),
        (
            "relative.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"echo hi\"\n",
            "literal absolute path",
        ),
        (
            "regex.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/bin/echo {p}\"\nparams.p = { type = \"string\", pattern = \"(\" }\n",
            "bad pattern",
        ),
        (
            "env.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/usr/bin/env X=1 /bin/echo\"\n",
            "shell/interpreter",
        ),
        (
            "python.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/usr/bin/python3.11 -c print(1)\"\n",
            "shell/interpreter",
        ),
        (
            "optional.toml",
            "version = 1\n[roles.a]\nuids = [1]\n[verb.x]\nroles = [\"a\"]\ncommand = \"/bin/echo {p}\"\nparams.p = { type = \"int\", min = 1, max = 2, required = false }\n",
            "optional group",
        ),
    ] {
        let (code, err) = check(&write(name, text));
        assert_eq!(code, Some(1), "{name}");
        assert!(
            err.contains(&format!("{name}:")) && err.contains(needle),
            "{name}: {err}"
        );
    }
    // An undefined approver role is located at its name, globally and on a verb (it was 1:1).
    let approvers = write(
        "approvers.toml",
        "version = 1\n[roles.a]\nuids = [1]\n[approvals]\napprovers = [\"nosuch\"]\n[verb.x]\nroles = [\"a\"]\napprovers = [\"ghost\"]\ncommand = \"/bin/true\"\n",
    );
    let (code, err) = check(&approvers);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("approvers.toml:5:14: approver role `nosuch` is not defined")
            && err.contains("approvers.toml:8:14: approver role `ghost` is not defined"),
        "{err}"
    );
    // The shipped policies are valid: the demo as it is, the example on a host with the
    // accounts its package creates (it names them as daemon.user and socket groups).
    let (code, err) = check(std::path::Path::new("policy/demo.toml"));
    assert_eq!(code, Some(0), "demo: {err}");
    if nix::unistd::User::from_name("verbd")
        .ok()
        .flatten()
        .is_none()
    {
        let (code, err) = check(std::path::Path::new("policy/example.toml"));
        assert_eq!(code, Some(1), "example without its accounts: {err}");
        // Located at the value of `user = "verbd"`, wherever the example keeps it.
        let example = std::fs::read_to_string("policy/example.toml").unwrap();
        let line = 1 + example
            .lines()
            .position(|l| l.starts_with("user = \"verbd\""))
            .expect("the example names its daemon user");
        let located =
            format!("daemon.user \"verbd\" (policy/example.toml:{line}:8) does not exist");
        assert!(err.contains(&located), "{err}");
    }
    if !require_root("the example policy with the package's accounts") {
        return;
    }
    let out = PackageAccounts::create()
        .command(BIN)
        .args(["policy", "check", "policy/example.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "example: {out:?}");
}

#[test]
fn root_start_drops_to_the_daemon_user_and_refuses_root_otherwise() {
    if !require_root("privilege drop") {
        return;
    }
    let policy = verbs().daemon_user("nobody").render();
    let d = Daemon::start(&policy);
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == "65534"),
        "{uid_line}"
    );
    let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert!(
        !groups.split_whitespace().skip(1).any(|g| g == "0"),
        "{groups}"
    );
    // Verbs run as the daemon user.
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    // Without `user` and without allow_root, root is refused.
    let policy = verbs().render();
    let dir = open_tempdir();
    let mut refused = Daemon::spawn_in(dir, &policy, &[]);
    let status = refused.child.as_mut().unwrap().wait().unwrap();
    refused.child = None;
    assert!(!status.success());
    assert!(
        refused.log().contains("refusing to run as root"),
        "{}",
        refused.log()
    );
}

#[test]
fn a_live_socket_is_never_taken_over_and_a_stale_one_is_replaced() {
    if !require_root("socket handling") {
        return;
    }
    let mut d = Daemon::start(&policy());
    // A second daemon on the same socket refuses.
    let out = Command::new(BIN)
        .args(["serve", "--policy"])
        .arg(&d.policy)
        .arg("--socket")
        .arg(&d.socket)
        .arg("--state-dir")
        .arg(d.path("state2"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already serving"),
        "{out:?}"
    );
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    // Mode as configured (0660 by default).
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    // kill -9 leaves a stale socket file: the next start replaces it.
    d.kill9();
    assert!(d.socket.exists());
    d.respawn();
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
}

#[test]
fn connections_over_the_limit_get_busy_at_once() {
    if !require_root("connection limit") {
        return;
    }
    let d = Daemon::start(
        &verbs()
            .allow_root()
            .max_connections(5)
            .max_connections_per_uid(3)
            .render(),
    );
    d.open_socket();
    // One agent holds its three places with stalled requests; its fourth connection is refused
    // at once, naming the per-uid limit.
    let settle = Duration::from_millis(800);
    let agent = hostile::hold_connections_as(61001, &d.socket, 4, b"{\"v\":1,", false, settle);
    assert_eq!(agent.unanswered(), 3);
    let refused: Vec<String> = agent
        .answers()
        .map(|raw| match Response::decode(raw) {
            Ok(Response::Busy { message }) => message,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("uid 61001")
            && refused[0].contains("daemon.max_connections_per_uid = 3"),
        "{}",
        refused[0]
    );
    // Another uid is still served, promptly: the agent's flood is its own.
    let started = Instant::now();
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "another uid waited {:?}",
        started.elapsed()
    );
    // A second stalling uid takes the socket's last two places: now the total refuses everyone,
    // at once, naming it. (Root's call above may hold its place for a moment after its answer;
    // a second uid refused for that reason tries again.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let other = loop {
        let other = hostile::hold_connections_as(61002, &d.socket, 2, b"{\"v\":1,", false, settle);
        if other.unanswered() == 2 {
            break other;
        }
        assert!(
            Instant::now() < deadline,
            "the last two places never came free"
        );
        drop(other);
        std::thread::sleep(Duration::from_millis(100));
    };
    let started = Instant::now();
    match d.call("hello", &[]) {
        Response::Busy { message } => {
            assert!(message.contains("daemon.max_connections = 5"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "busy must be immediate"
    );
    drop(agent);
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match d.call("hello", &[]) {
            Response::Ok { result, .. } => break assert_eq!(result.stdout, "hello\n"),
            Response::Busy { .. } if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => panic!("the places were not given back: {other:?}"),
        }
    }
}

#[test]
fn embedded_demo_policy_serves_its_invoker() {
    if !require_root("demo policy") {
        return;
    }
    let dir = open_tempdir();
    let socket = dir.path().join("demo.sock");
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _daemon = Reap(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "demo daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let call = |args: &[&str]| {
        Command::new(BIN)
            .args(["call", "--socket"])
            .arg(&socket)
            .args(args)
            .output()
            .unwrap()
    };
    let out = call(&["echo", "text=hello.world_1-2"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello.world_1-2\n");
    let out = call(&["uptime"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("load average"));
    // Every demo verb works on this box.
    for verb in [
        &["whoami"][..],
        &["disk-usage"],
        &["disk-free"],
        &["disk-free", "mount=/"],
        &["list-docs", "dir=/usr/share/doc"],
        &["date", "utc=true"],
    ] {
        let out = call(verb);
        assert_eq!(out.status.code(), Some(0), "{verb:?}: {out:?}");
    }
    let out = call(&["echo", "text=two words"]);
    assert_eq!(out.status.code(), Some(65));
    // A different uid is not the invoker: no role. The socket is opened to everyone first, so
    // the refusal is the role check's, not the socket's permissions.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new(BIN)
        .args(["call", "--socket"])
        .arg(&socket)
        .args(["uptime"])
        .uid(61400)
        .gid(61400)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("matches no role"),
        "{out:?}"
    );
}
