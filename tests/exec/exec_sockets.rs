//! `verbd exec` and the user's own services on Unix sockets: a hostile agent (an unprivileged uid
//! confined by `verbd exec`) against real servers of the same uid — a tmux server, listening
//! sockets standing in for an ssh-agent and a session bus, a socket created after the sandbox
//! started — is refused at `connect`, with the same setup outside `verbd exec` as the positive
//! control; verbd's own socket works (`verbd call` inside `verbd exec`, journaled with the
//! caller's real uid).
use crate::common;
use crate::hostile;
use common::policy::{Category, NetworkMode, Policy, RunAs, Sandbox, Verb, write_exec_policy};
use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TMUX_UID: u32 = 61700;
const LISTENERS_UID: u32 = 61701;
const CALLER_UID: u32 = 61702;
const ENV_UID: u32 = 61703;
const TMUX: &str = "/usr/bin/tmux";
const PYTHON: &str = "/usr/bin/python3";

/// A temp dir with `work` (the agent's project, owned by `uid`) and `outside` (owned by `uid`,
/// outside every write root), and a policy whose `agent` profile writes only `work`.
fn setup(uid: u32, customize: impl FnOnce(&mut Sandbox)) -> (tempfile::TempDir, PathBuf) {
    let dir = open_tempdir();
    for sub in ["work", "outside"] {
        let path = dir.path().join(sub);
        std::fs::create_dir(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
    let bin_dir = Path::new(BIN).parent().unwrap();
    let work = dir.path().join("work");
    let mut agent = Sandbox {
        network: Some(NetworkMode::None),
        ..Sandbox::new(
            &[
                "/usr",
                "/lib",
                "/etc",
                "/bin",
                "/dev",
                "/proc",
                bin_dir.to_str().unwrap(),
            ],
            &[work.to_str().unwrap()],
        )
    };
    customize(&mut agent);
    let policy = dir.path().join("policy.toml");
    write_exec_policy(&policy, agent);
    (dir, policy)
}

fn as_uid<'a>(cmd: &'a mut Command, uid: u32, home: &Path) -> &'a mut Command {
    cmd.uid(uid)
        .gid(uid)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("SHELL", "/bin/sh")
        .env("TERM", "xterm")
        .current_dir(home)
}

fn verbd_exec(policy: &Path, uid: u32, home: &Path, program: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    as_uid(&mut cmd, uid, home);
    cmd.args(["exec", "--policy"])
        .arg(policy)
        .args(["--profile", "agent", "--"])
        .args(program);
    cmd
}

fn wait_for(path: &Path, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn tmux_send_keys_from_verbd_exec_is_refused_and_nothing_runs() {
    if !require_root("tmux_send_keys_from_verbd_exec_is_refused_and_nothing_runs") {
        return;
    }
    let (dir, policy) = setup(TMUX_UID, |_| {});
    let home = dir.path().join("work");
    let socket = dir.path().join("outside/tmux.sock");
    let socket_arg = socket.to_str().unwrap();
    let out = as_uid(&mut Command::new(TMUX), TMUX_UID, &home)
        .args([
            "-S",
            socket_arg,
            "new-session",
            "-d",
            "-s",
            "main",
            "/bin/sh",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "tmux server: {}", text(&out));
    let escaped = dir.path().join("outside/ESCAPED");
    let control = dir.path().join("outside/CONTROL");

    // The attack: the confined agent types into the user's unconfined tmux shell.
    let keys = format!("echo ESCAPED > {}", escaped.display());
    let attack = verbd_exec(
        &policy,
        TMUX_UID,
        &home,
        &[
            TMUX,
            "-S",
            socket_arg,
            "send-keys",
            "-t",
            "main",
            &keys,
            "Enter",
        ],
    )
    .output()
    .unwrap();
    println!("attack: {}", text(&attack));
    assert!(!attack.status.success(), "{}", text(&attack));
    let stderr = String::from_utf8_lossy(&attack.stderr);
    assert!(
        stderr.contains(&format!(
            "Unix socket {} is not in the profile's unix_sockets",
            socket.display()
        )),
        "{stderr}"
    );

    // Positive control: the same send-keys outside verbd exec runs in the pane. Once it has,
    // the pane has processed every earlier keystroke, so ESCAPED would exist by now.
    let keys = format!("echo CONTROL > {}", control.display());
    let out = as_uid(&mut Command::new(TMUX), TMUX_UID, &home)
        .args(["-S", socket_arg, "send-keys", "-t", "main", &keys, "Enter"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        wait_for(&control, Duration::from_secs(10)),
        "control never ran"
    );
    assert!(!escaped.exists(), "the confined send-keys ran in tmux");
    let _ = as_uid(&mut Command::new(TMUX), TMUX_UID, &home)
        .args(["-S", socket_arg, "kill-server"])
        .output();
}

/// Tries each socket given on the command line, then waits for `late` to appear and tries it.
const PROBE: &str = r#"
import errno, os, socket, sys, time
def attempt(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return "0"
    except OSError as e:
        return str(e.errno)
    finally:
        s.close()
for path in sys.argv[2:]:
    print(os.path.basename(path), attempt(path), flush=True)
for name, kind in [("dgram", socket.SOCK_DGRAM), ("raw", socket.SOCK_RAW)]:
    try:
        socket.socket(socket.AF_UNIX, kind)
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
print("started", flush=True)
late = sys.argv[1]
deadline = time.time() + 20
while not os.path.exists(late) and time.time() < deadline:
    time.sleep(0.05)
print(os.path.basename(late), attempt(late), flush=True)
"#;

fn listener(path: &Path) -> UnixListener {
    let listener = UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

fn nobody_connected(listener: &UnixListener, name: &str) {
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("{name}: a connection reached the listener: {other:?}"),
    }
}

#[test]
fn agent_bus_and_late_sockets_are_refused_and_a_listed_one_connects() {
    if !require_root("agent_bus_and_late_sockets_are_refused_and_a_listed_one_connects") {
        return;
    }
    let services_dir = open_tempdir();
    let services = services_dir.path();
    let listed = services.join("listed.sock");
    let (dir, policy) = setup(LISTENERS_UID, |agent| {
        agent.unix_sockets = Some(vec![listed.to_str().unwrap().into()]);
    });
    let home = dir.path().join("work");
    let agent_path = services.join("ssh-agent.sock");
    let bus_path = services.join("bus");
    let late_path = services.join("late.sock");
    let agent = listener(&agent_path);
    let bus = listener(&bus_path);
    let listed_listener = listener(&listed);

    // Positive control: outside verbd exec the same uid reaches every one of them.
    let mut control = Command::new(PYTHON);
    as_uid(&mut control, LISTENERS_UID, &home)
        .args(["-c", PROBE, "/nonexistent-late"])
        .args([&agent_path, &bus_path, &listed]);
    let out = control.output().unwrap();
    println!("control: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in ["ssh-agent.sock 0", "bus 0", "listed.sock 0"] {
        assert!(stdout.contains(line), "control {line}: {}", text(&out));
    }
    for (l, name) in [
        (&agent, "agent"),
        (&bus, "bus"),
        (&listed_listener, "listed"),
    ] {
        l.accept().unwrap_or_else(|e| panic!("{name} control: {e}"));
    }

    let mut confined = verbd_exec(
        &policy,
        LISTENERS_UID,
        &home,
        &[
            PYTHON,
            "-c",
            PROBE,
            late_path.to_str().unwrap(),
            agent_path.to_str().unwrap(),
            bus_path.to_str().unwrap(),
            listed.to_str().unwrap(),
            // No existence oracle: a path that does not exist answers like an unlisted one.
            services.join("absent.sock").to_str().unwrap(),
        ],
    );
    let mut child = confined
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line == "started";
        seen.push(line);
        if done {
            break;
        }
    }
    // A socket that appears after the sandbox started.
    let late = listener(&late_path);
    seen.extend(lines.map(Result::unwrap));
    let out = child.wait_with_output().unwrap();
    println!("confined: {seen:?}\n{}", text(&out));
    let eacces = libc::EACCES.to_string();
    for (name, want) in [
        ("ssh-agent.sock", eacces.as_str()),
        ("bus", eacces.as_str()),
        ("late.sock", eacces.as_str()),
        ("listed.sock", "0"),
        ("absent.sock", eacces.as_str()),
        ("dgram", "1"),
        ("raw", "1"),
    ] {
        let line = format!("{name} {want}");
        assert!(seen.contains(&line), "{line} in {seen:?}");
    }
    nobody_connected(&agent, "ssh-agent");
    nobody_connected(&bus, "bus");
    nobody_connected(&late, "late");
    listed_listener
        .accept()
        .expect("the listed socket got its connection");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "Unix socket {} is not in the profile's unix_sockets",
            late_path.display()
        )),
        "{stderr}"
    );
}

fn echo_policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[CALLER_UID])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello-from-verbd")
                .description("greets")
                .roles(&["agent"]),
        )
        .render()
}

#[test]
fn verbd_call_inside_verbd_exec_reaches_the_daemon_as_the_real_uid() {
    if !require_root("verbd_call_inside_verbd_exec_reaches_the_daemon_as_the_real_uid") {
        return;
    }
    let daemon = Daemon::start(&echo_policy());
    daemon.open_socket();
    let (dir, policy) = setup(CALLER_UID, |_| {});
    let home = dir.path().join("work");
    let out = verbd_exec(&policy, CALLER_UID, &home, &[BIN, "call", "hello"])
        .env("VERBD_SOCKET", &daemon.socket)
        .output()
        .unwrap();
    println!("call: {}", text(&out));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hello-from-verbd"),
        "{}",
        text(&out)
    );
    let callers: Vec<u64> = daemon
        .journal_events()
        .iter()
        .filter_map(|e| e.get("caller")?.get("uid")?.as_u64())
        .collect();
    println!("journaled caller uids: {callers:?}");
    assert!(!callers.is_empty(), "journal: {}", daemon.journal());
    assert!(
        callers.iter().all(|&uid| uid == u64::from(CALLER_UID)),
        "{callers:?}"
    );
}

#[test]
fn service_variables_are_dropped_unless_kept_and_print_status_shows_the_allowlist() {
    if !require_root("service_variables_are_dropped_unless_kept") {
        return;
    }
    let (dir, policy) = setup(ENV_UID, |agent| agent.keep_env = Some(vec!["TMUX".into()]));
    let home = dir.path().join("work");
    let out = verbd_exec(&policy, ENV_UID, &home, &["/usr/bin/env"])
        .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1/bus")
        .env("DISPLAY", ":0")
        .env("TMUX", "/tmp/tmux-1/default,1,0")
        .env("VERBD_SOCKET", "/run/verbd-test.sock")
        .output()
        .unwrap();
    println!("{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("SSH_AUTH_SOCK="), "{stdout}");
    assert!(!stdout.contains("DBUS_SESSION_BUS_ADDRESS="), "{stdout}");
    assert!(!stdout.contains("DISPLAY="), "{stdout}");
    assert!(stdout.contains("TMUX=/tmp/tmux-1/default,1,0"), "{stdout}");
    assert!(
        stdout.contains("VERBD_SOCKET=/run/verbd-test.sock"),
        "{stdout}"
    );

    let mut status = Command::new(BIN);
    as_uid(&mut status, ENV_UID, &home)
        .args(["exec", "--print-status", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
        .env("VERBD_SOCKET", "/run/verbd-test.sock");
    let out = status.output().unwrap();
    println!("{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr.contains("unix sockets: connect brokered; allowed: [/run/verbd-test.sock]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("environment: dropped [SSH_AUTH_SOCK]"),
        "{stderr}"
    );
}

const VERB_RUN_AS: u32 = 61704;

/// `python3 probe.py SOCKET…`: `name errno` per socket (0 = connected).
const VERB_PROBE: &str = r#"
import os, socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print(os.path.basename(path), 0)
    except OSError as e:
        print(os.path.basename(path), e.errno)
"#;

#[test]
fn a_verb_reaches_only_its_listed_socket_and_the_server_sees_its_run_as_uid() {
    if !require_root("a_verb_reaches_only_its_listed_socket") {
        return;
    }
    let policy = Policy::new()
        .allow_root()
        .agents("me", &[0])
        .sandbox(
            "db",
            Sandbox {
                network: Some(NetworkMode::None),
                unix_sockets: Some(vec!["@DIR@/services/db.sock".into()]),
                run_as: Some(RunAs {
                    user: VERB_RUN_AS.to_string(),
                }),
                ..Sandbox::new(&["/usr", "/lib", "/etc", "/bin", "@DIR@/probe"], &[])
            },
        )
        .verb(
            "probe",
            Verb::argv(
                Category::ReadOnly,
                &[
                    PYTHON,
                    "@DIR@/probe/probe.py",
                    "@DIR@/services/db.sock",
                    "@DIR@/services/ssh-agent.sock",
                ],
            )
            .description("tries the sockets")
            .roles(&["me"])
            .sandbox("db")
            .allow_interpreter(),
        )
        .render();
    let mut listeners = Vec::new();
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("probe")).unwrap();
        std::fs::write(dir.join("probe/probe.py"), VERB_PROBE).unwrap();
        std::fs::create_dir(dir.join("services")).unwrap();
        for name in ["db.sock", "ssh-agent.sock"] {
            listeners.push(listener(&dir.join("services").join(name)));
        }
    });
    let response = daemon.call("probe", &[]);
    let out = stdout_of(&response);
    println!("verb:\n{out}\n{response:?}");
    assert!(out.lines().any(|l| l == "db.sock 0"), "{out}");
    assert!(
        out.lines()
            .any(|l| l == format!("ssh-agent.sock {}", libc::EACCES)),
        "{out}"
    );
    let (db, _) = listeners[0]
        .accept()
        .expect("the listed socket was reached");
    let peer =
        nix::sys::socket::getsockopt(&db, nix::sys::socket::sockopt::PeerCredentials).unwrap();
    println!("peer of the brokered connection: uid {}", peer.uid());
    assert_eq!(
        peer.uid(),
        VERB_RUN_AS,
        "the server sees the verb's run-as uid"
    );
    nobody_connected(&listeners[1], "ssh-agent");
}

#[test]
fn the_self_test_canary_proves_unlisted_sockets_and_datagrams_are_unreachable() {
    if !require_root("the_self_test_canary_proves_unlisted_sockets_and_datagrams_are_unreachable") {
        return;
    }
    let (_dir, policy) = setup(ENV_UID, |_| {});
    let selftest = |unsandboxed: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args(["selftest", "--policy"]).arg(&policy);
        if unsandboxed {
            cmd.env(verbd::selftest::UNSANDBOXED_CANARY_ENV, "1");
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let confined = selftest(false);
    println!("sandboxed canary:\n{confined}");
    let agent = confined
        .lines()
        .find(|l| l.contains("sandbox:agent"))
        .unwrap_or_else(|| panic!("{confined}"));
    assert!(
        agent.starts_with("PASS") && agent.contains("unix-socket, unix-datagram"),
        "{agent}"
    );
    // Negative control: the same canary without its sandbox reaches the socket, and the
    // self-test says so.
    let unsandboxed = selftest(true);
    println!("unsandboxed canary:\n{unsandboxed}");
    let agent = unsandboxed
        .lines()
        .find(|l| l.contains("sandbox:agent"))
        .unwrap_or_else(|| panic!("{unsandboxed}"));
    assert!(
        agent.starts_with("FAIL")
            && agent.contains("unix-socket: connected to")
            && agent.contains("socket(SOCK_RAW) was created and sent"),
        "{agent}"
    );
}

#[test]
fn verbd_mcp_inside_verbd_exec_serves_the_agent_with_no_setup() {
    if !require_root("verbd_mcp_inside_verbd_exec_serves_the_agent_with_no_setup") {
        return;
    }
    use std::io::Write;
    let daemon = Daemon::start(&echo_policy());
    daemon.open_socket();
    let (dir, policy) = setup(CALLER_UID, |_| {});
    let home = dir.path().join("work");
    let mut child = verbd_exec(&policy, CALLER_UID, &home, &[BIN, "mcp"])
        .env("VERBD_SOCKET", &daemon.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answer_to = |id: u64, message: serde_json::Value| -> serde_json::Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        for line in lines.by_ref() {
            let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if value["id"] == id {
                return value;
            }
        }
        panic!("no answer to {id}");
    };
    let init = answer_to(
        0,
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "agent", "version": "0"}}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    let listed = answer_to(
        1,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    let tool = listed["result"]["tools"][0]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("{listed}"))
        .to_string();
    let called = answer_to(
        2,
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}}),
    );
    println!("tools/call {tool}: {called}");
    assert!(called.to_string().contains("hello-from-verbd"), "{called}");
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

const DATAGRAM_UID: u32 = 61760;
const DATAGRAM_CALLER_UID: u32 = 61761;

/// `python3 -c DATAGRAM_PROBE TARGET`: tries every way of sending a datagram to the Unix path
/// TARGET (`name errno` per attempt, 0 = sent), then checks that stream and seqpacket pairs
/// still work.
const DATAGRAM_PROBE: &str = r#"
import socket, sys
target = sys.argv[1]
def attempt(name, make):
    try:
        s = make()
        s.sendto(b"ESCAPED-" + name.encode(), target)
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
attempt("raw", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_RAW))
attempt("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("raw-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW)[0])
attempt("dgram-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0])
# Every spelling of the two allowed types: Python adds SOCK_CLOEXEC itself, so the `-nonblock`
# pairs are the type with both flags.
for name, kind in [("stream-pair", socket.SOCK_STREAM), ("seqpacket-pair", socket.SOCK_SEQPACKET),
                   ("stream-pair-nonblock", socket.SOCK_STREAM | socket.SOCK_NONBLOCK),
                   ("seqpacket-pair-nonblock", socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)]:
    try:
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.send(b"x")
        print(name, 0 if b.recv(1) == b"x" else "lost", flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
"#;

/// A datagram socket bound at `path`, writable by every uid, non-blocking.
fn datagram_listener(path: &Path) -> std::os::unix::net::UnixDatagram {
    let socket = std::os::unix::net::UnixDatagram::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    socket.set_nonblocking(true).unwrap();
    socket
}

/// Every datagram waiting on `socket`.
fn received(socket: &std::os::unix::net::UnixDatagram) -> Vec<String> {
    let mut out = Vec::new();
    let mut buffer = [0u8; 256];
    while let Ok(n) = socket.recv(&mut buffer) {
        out.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
    }
    out
}

fn expect_no_datagram_sent(out: &str) {
    let eperm = libc::EPERM.to_string();
    for name in ["raw", "dgram", "raw-pair", "dgram-pair"] {
        let line = format!("{name} {eperm}");
        assert!(out.lines().any(|l| l == line), "{line} in:\n{out}");
    }
    for line in [
        "stream-pair 0",
        "seqpacket-pair 0",
        "stream-pair-nonblock 0",
        "seqpacket-pair-nonblock 0",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in:\n{out}");
    }
}

#[test]
fn no_unix_datagram_reaches_an_unlisted_listener_from_verbd_exec() {
    if !require_root("no_unix_datagram_reaches_an_unlisted_listener_from_verbd_exec") {
        return;
    }
    let services_dir = open_tempdir();
    let target = services_dir.path().join("journal.sock");
    let listener = datagram_listener(&target);
    let (dir, policy) = setup(DATAGRAM_UID, |_| {});
    let home = dir.path().join("work");
    let target_arg = target.to_str().unwrap();

    // Positive control: outside verbd exec, every kind of datagram arrives.
    let mut control = Command::new(PYTHON);
    as_uid(&mut control, DATAGRAM_UID, &home).args(["-c", DATAGRAM_PROBE, target_arg]);
    let out = control.output().unwrap();
    println!("control: {}", text(&out));
    let arrived = received(&listener);
    println!("control datagrams: {arrived:?}");
    for name in ["raw", "dgram", "raw-pair", "dgram-pair"] {
        assert!(
            arrived.contains(&format!("ESCAPED-{name}")),
            "control {name}: {arrived:?}"
        );
    }

    let out = verbd_exec(
        &policy,
        DATAGRAM_UID,
        &home,
        &[PYTHON, "-c", DATAGRAM_PROBE, target_arg],
    )
    .output()
    .unwrap();
    println!("confined: {}", text(&out));
    let arrived = received(&listener);
    assert!(
        arrived.is_empty(),
        "datagrams reached the listener: {arrived:?}"
    );
    expect_no_datagram_sent(&String::from_utf8_lossy(&out.stdout));
}

#[test]
fn no_unix_datagram_reaches_an_unlisted_listener_from_a_verb() {
    if !require_root("no_unix_datagram_reaches_an_unlisted_listener_from_a_verb") {
        return;
    }
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[DATAGRAM_CALLER_UID])
        .sandbox(
            "probe",
            Sandbox {
                network: Some(NetworkMode::None),
                ..Sandbox::new(&["/usr", "/lib", "/etc", "/bin", "@DIR@/probe"], &[])
            },
        )
        .verb(
            "probe",
            Verb::argv(
                Category::ReadOnly,
                &[
                    PYTHON,
                    "@DIR@/probe/probe.py",
                    "@DIR@/services/journal.sock",
                ],
            )
            .description("sends datagrams")
            .roles(&["agent"])
            .sandbox("probe")
            .allow_interpreter(),
        )
        .render();
    let mut listener = None;
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("probe")).unwrap();
        std::fs::write(dir.join("probe/probe.py"), DATAGRAM_PROBE).unwrap();
        std::fs::create_dir(dir.join("services")).unwrap();
        listener = Some(datagram_listener(&dir.join("services/journal.sock")));
    });
    daemon.open_socket();
    let listener = listener.unwrap();
    let answers = hostile::requests_as(
        DATAGRAM_CALLER_UID,
        &daemon.socket,
        &[hostile::call("probe", &[])],
    );
    let response = hostile::decode(&answers[0]);
    let out = stdout_of(&response);
    println!("verb:\n{out}\n{response:?}");
    let arrived = received(&listener);
    assert!(
        arrived.is_empty(),
        "datagrams reached the listener: {arrived:?}"
    );
    expect_no_datagram_sent(&out);
}

const SWAP_UID: u32 = 61768;

/// Replaces the listed socket (inside the write root) with a symlink to the unlisted one, then
/// connects to the listed path.
const SWAP: &str = r#"
import os, socket, sys
listed, unlisted = sys.argv[1], sys.argv[2]
os.unlink(listed)
os.symlink(unlisted, listed)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(listed)
    print("swapped 0", flush=True)
except OSError as e:
    print("swapped", e.errno, flush=True)
"#;

/// A listed socket inside a write root of the same profile can be swapped by the confined
/// program for a symlink to any socket, which the broker (outside the sandbox) would follow: such
/// a profile is refused.
#[test]
fn a_listed_socket_inside_a_write_root_is_refused() {
    if !require_root("a_listed_socket_inside_a_write_root_is_refused") {
        return;
    }
    let services_dir = open_tempdir();
    let unlisted_path = services_dir.path().join("tmux.sock");
    let unlisted = listener(&unlisted_path);
    let dir = open_tempdir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(SWAP_UID), Some(SWAP_UID)).unwrap();
    let listed_path = work.join("db.sock");
    let _listed = listener(&listed_path);
    std::os::unix::fs::chown(&listed_path, Some(SWAP_UID), Some(SWAP_UID)).unwrap();
    let (_policy_dir, policy) = setup(SWAP_UID, |agent| {
        agent.unix_sockets = Some(vec![listed_path.to_str().unwrap().into()]);
        // The profile of `setup` writes its own work directory; point it at this one.
        agent.write = Some(vec![work.to_str().unwrap().into()]);
    });
    let out = verbd_exec(
        &policy,
        SWAP_UID,
        &work,
        &[
            PYTHON,
            "-c",
            SWAP,
            listed_path.to_str().unwrap(),
            unlisted_path.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    println!("{}", text(&out));
    nobody_connected(&unlisted, "the unlisted socket");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "the program ran"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lies inside write root"),
        "{}",
        text(&out)
    );
}
