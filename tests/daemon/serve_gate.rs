//! Invariant 8: the self-test gates service. A bad policy or host means `serve` exits non-zero,
//! never accepts a connection and never tells systemd READY; a healthy one sends READY only after
//! the self-test. Also: socket activation, live reload, and SIGTERM with a running verb.
use crate::common;
use common::policy::{Category, Param, Policy, Secret, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A policy that passes its self-test: `hello`, and `nap` for a run still going at shutdown.
fn healthy() -> Policy {
    Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .humans("me", &[0])
        .approvers(&["me"])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("hello")
                .roles(&["me"]),
        )
        .verb(
            "nap",
            Verb::command(Category::ReadOnly, "/bin/sleep {secs}")
                .description("a long verb")
                .roles(&["me"])
                .timeout("60s")
                .param("secs", Param::matching(r"[0-9]+\.[0-9]+")),
        )
}

/// [`healthy`] with one more verb `name` for `me`, running `command`.
fn healthy_and(name: &str, command: &str, verb: impl FnOnce(Verb) -> Verb) -> String {
    let extra = Verb::command(Category::ReadOnly, command).roles(&["me"]);
    healthy().verb(name, verb(extra)).render()
}

/// A datagram socket standing in for systemd's NOTIFY_SOCKET.
struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    fn new(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Notify { socket, path }
    }

    fn drain(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }
}

/// A directory for test binaries whose parents are all root-owned and not writable by others.
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Start `serve` on `policy`, hammer its socket while it starts, and return how it ended.
fn must_refuse_to_serve(policy: &str, env: &[(&str, &str)], setup: impl FnOnce(&Path)) -> String {
    let dir = open_tempdir();
    setup(dir.path());
    let notify = Notify::new(dir.path());
    let notify_path = notify.path.to_str().unwrap().to_string();
    let mut all_env = vec![("NOTIFY_SOCKET", notify_path.as_str())];
    all_env.extend_from_slice(env);
    let mut d = Daemon::spawn_in(dir, policy, &all_env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        // A client started alongside: the socket never accepts (no listen before the self-test
        // passes), so connect fails with ENOENT (no socket yet) or ECONNREFUSED (not listening).
        match UnixStream::connect(&d.socket) {
            Ok(mut s) => {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = s.write_all(b"{\"v\":1,\"op\":\"list\"}\n");
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                panic!("a failing daemon accepted a connection (answer: {answer:?})");
            }
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ),
                "connect to a failing daemon: {e}"
            ),
        }
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not exit: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    };
    d.child = None;
    assert_eq!(status.code(), Some(78), "{}", d.log());
    let messages = notify.drain();
    assert!(
        messages.iter().all(|m| !m.contains("READY=1")),
        "READY sent by a failing daemon: {messages:?}"
    );
    d.log()
}

#[test]
fn failing_self_test_never_serves() {
    if !require_root("serve gate") {
        return;
    }
    let bins = bin_dir();
    let group_writable = bins.path().join("gw-true");
    std::fs::copy("/bin/true", &group_writable).unwrap();
    std::fs::set_permissions(&group_writable, std::fs::Permissions::from_mode(0o775)).unwrap();
    let setuid = bins.path().join("suid-true");
    std::fs::copy("/bin/true", &setuid).unwrap();
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let verb = |command: &str, settings: fn(Verb) -> Verb| {
        healthy_and("bad", command, |verb| settings(verb.description("bad")))
    };
    // (policy, text the failure report must contain, extra environment)
    type Case<'a> = (String, String, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            verb("/nonexistent/verbd-test-tool", |verb| verb),
            "binary:bad".into(),
            vec![],
        ),
        (
            verb(group_writable.to_str().unwrap(), |verb| verb),
            "mode 0775".into(),
            vec![],
        ),
        (
            verb(setuid.to_str().unwrap(), |verb| verb),
            "setuid".into(),
            vec![],
        ),
        (
            verb("/bin/echo {w}", |verb| {
                verb.param("w", Param::matching("[a-z]+"))
                    .accepts(&[("w", "UPPER")])
            }),
            "examples:bad".into(),
            vec![],
        ),
        (
            healthy()
                .secret("leaky", Secret::File("@DIR@/leaky".into()))
                .render(),
            "secret:leaky".into(),
            vec![],
        ),
        (
            verb("/bin/true", |verb| verb.sha256(&"0".repeat(64))),
            "the policy pins".into(),
            vec![],
        ),
        (
            verb("/bin/echo {w}", |verb| {
                verb.param("w", Param::matching("[a-z]+"))
                    .rejects(&[("w", "fine")])
            }),
            "was ACCEPTED".into(),
            vec![],
        ),
        (
            healthy().render(),
            "sandbox:default".into(),
            vec![(verbd::selftest::UNSANDBOXED_CANARY_ENV, "1")],
        ),
    ];
    for (policy, needle, env) in cases {
        let log = must_refuse_to_serve(&policy, &env, |dir| {
            let secret = dir.join("leaky");
            std::fs::write(&secret, "a-long-enough-secret").unwrap();
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        });
        assert!(
            log.contains("FAIL") && log.contains(&needle),
            "{needle}: {log}"
        );
        // The unsandboxed canary: every probe must see its own escape, so one probe that always
        // said "confined" would not be masked by the others.
        if needle == "sandbox:default" {
            for probe in [
                "write-outside: created",
                "denied-syscall: unshare(CLONE_NEWUSER) succeeded",
                "network: socket(AF_INET) succeeded",
                "no-new-privs: no_new_privs=0",
                "seccomp: mode 0",
                "capabilities: effective=",
                "unix-socket: connected to",
                "fast-open: send(MSG_FASTOPEN) reached the kernel",
                "unix-datagram: socket(SOCK_DGRAM) was created",
                "unix-datagram: the datagram \"SOCK_DGRAM\" reached",
            ] {
                assert!(log.contains(probe), "{probe}: {log}");
            }
        }
        assert!(log.contains("not serving"), "{log}");
    }
}

#[test]
fn ready_only_after_the_self_test() {
    if !require_root("serve ready") {
        return;
    }
    let dir = open_tempdir();
    let notify = Notify::new(dir.path());
    let notify_path = notify.path.to_str().unwrap().to_string();
    let d = Daemon::spawn_in(dir, &healthy().render(), &[("NOTIFY_SOCKET", &notify_path)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let mut buf = [0u8; 4096];
        if let Ok(n) = notify.socket.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.contains("READY=1") {
                break msg;
            }
        }
        assert!(Instant::now() < deadline, "no READY: {}", d.log());
    };
    // The self-test line was written before READY arrived.
    assert!(d.log().contains("self-test passed"), "{}", d.log());
    assert!(ready.contains("STATUS="), "{ready}");
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
}

#[test]
fn socket_activation_end_to_end() {
    if !require_root("socket activation") {
        return;
    }
    let dir = open_tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, healthy().render()).unwrap();
    let socket = dir.path().join("activated.sock");
    let mut child = Command::new("/usr/bin/systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=agent")
        .arg(BIN)
        .args(["serve", "--policy"])
        .arg(&policy)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = verbd::client::request(
        &socket,
        &verbd::protocol::Request::Call {
            verb: "hello".into(),
            args: Default::default(),
            reason: None,
            idempotency_key: None,
            stream: None,
        },
        Duration::from_secs(30),
    );
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    let r = r.unwrap_or_else(|e| panic!("{e}: {log}"));
    assert_eq!(stdout_of(&r), "hello\n", "{log}");
    assert!(log.contains("sockets from systemd"), "{log}");
}

#[test]
fn reload_swaps_only_a_passing_policy() {
    if !require_root("reload") {
        return;
    }
    let mut d = Daemon::start(&healthy().render());
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    // A broken policy: the old one keeps serving.
    std::fs::write(&d.policy, "version = 1\n[verb.x]\ncomand = 1\n").unwrap();
    let out = d.cli(&["reload"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("old policy stays"),
        "{out:?}"
    );
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    // A policy that parses but fails its self-test (missing binary): also refused, via SIGHUP.
    std::fs::write(
        &d.policy,
        healthy_and("ghost", "/nonexistent/ghost", |verb| verb.description("x")),
    )
    .unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "reload")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "SIGHUP reload never finished: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The failing policy was not swapped in: `ghost` is unknown, not a failed exec.
    match d.call("ghost", &[]) {
        verbd::protocol::Response::Denied { reason } => assert!(
            reason.contains("verb `ghost` does not exist or is not available"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // A good one: the new verb appears.
    std::fs::write(
        &d.policy,
        healthy_and("fresh", "/bin/echo fresh", |verb| verb.description("x")),
    )
    .unwrap();
    let out = d.cli(&["reload"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout_of(&d.call("fresh", &[])), "fresh\n");
    let reloads: Vec<bool> = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "reload")
        .map(|e| e["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(reloads, [false, false, true]);
    d.stop();
}

#[test]
fn sigterm_kills_a_long_verb_after_the_grace_period() {
    if !require_root("sigterm") {
        return;
    }
    let mut d = Daemon::start(&healthy().render());
    let socket = d.socket.clone();
    let caller = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &verbd::protocol::Request::Call {
                verb: "nap".into(),
                args: [("secs".to_string(), serde_json::json!("97.531"))].into(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(60),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_matching("sleep 97.531").is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let status = d.stop().unwrap();
    assert!(status.success(), "{status:?}: {}", d.log());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let _ = caller.join();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        processes_matching("sleep 97.531").is_empty(),
        "the verb survived shutdown"
    );
    let stop = d
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "stop")
        .expect("shutdown journaled");
    assert_eq!(stop["in_flight"], 1, "{stop}");
    assert!(stop["reason"].as_str().unwrap().contains("SIGTERM"));
}

#[test]
fn a_journal_that_does_not_verify_stops_the_daemon() {
    if !require_root("journal gate") {
        return;
    }
    let mut d = Daemon::start(&healthy().render());
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    d.stop();
    let path = d.state.join("journal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("/bin/echo"));
    std::fs::write(&path, text.replace("/bin/echo", "/bin/ech0")).unwrap();
    let status = {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["serve", "--policy"])
            .arg(&d.policy)
            .arg("--socket")
            .arg(&d.socket)
            .arg("--state-dir")
            .arg(&d.state)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.output().unwrap()
    };
    assert_eq!(status.status.code(), Some(78));
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(
        err.contains("FAIL journal") && err.contains("not serving"),
        "{err}"
    );
    assert!(
        std::os::unix::net::UnixStream::connect(&d.socket).is_err(),
        "a connection was accepted"
    );
}
