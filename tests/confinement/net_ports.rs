//! `network = { connect_tcp = [PORT, …] }`: against two real TCP listeners, a confined program
//! connects to the listed port and is refused (EACCES) on the other; UDP and non-TCP sockets
//! cannot be created and no TCP port can be bound; TCP Fast Open (`MSG_FASTOPEN`, which connects
//! inside `sendto`/`sendmsg` without a `connect` the broker or Landlock could see) is refused, and
//! `TCP_FASTOPEN_CONNECT` still connects only where the brokered `connect` went. Checked for `verbd exec` as an unprivileged
//! uid and for a verb run by a real daemon; the same probe unconfined is the positive control.
use crate::common;
use common::policy::{Category, NetworkMode, Policy, Sandbox, Verb, write_exec_policy};
use common::*;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::Command;

const UID: u32 = 61720;
const PYTHON: &str = "/usr/bin/python3";

/// `python3 probe.py ALLOWED OTHER`: one `name errno` line per attempt (0 = success).
const PROBE: &str = r#"
import socket, sys
def attempt(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
def connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.connect(("127.0.0.1", port))
    finally:
        s.close()
def bind():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
    finally:
        s.close()
def fastopen_sendto(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.sendto(b"ESCAPED-sendto", socket.MSG_FASTOPEN, ("127.0.0.1", port))
    finally:
        s.close()
def fastopen_sendmsg(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.sendmsg([b"ESCAPED-sendmsg"], [], socket.MSG_FASTOPEN, ("127.0.0.1", port))
    finally:
        s.close()
TCP_FASTOPEN_CONNECT = 30
def deferred_connect(allowed, other):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
        s.connect(("127.0.0.1", allowed))
        s.sendto(b"deferred", ("127.0.0.1", other))
    finally:
        s.close()
def deferred_without_connect(other):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
        s.sendto(b"ESCAPED-deferred", ("127.0.0.1", other))
    finally:
        s.close()
allowed, other = int(sys.argv[1]), int(sys.argv[2])
print("allowed", attempt(lambda: connect(allowed)))
print("other", attempt(lambda: connect(other)))
print("fastopen-sendto", attempt(lambda: fastopen_sendto(other)))
print("fastopen-sendmsg", attempt(lambda: fastopen_sendmsg(other)))
print("deferred-connect", attempt(lambda: deferred_connect(allowed, other)))
print("deferred-without-connect", attempt(lambda: deferred_without_connect(other)))
print("udp", attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()))
print("bind", attempt(bind))
"#;

fn listeners() -> (TcpListener, TcpListener, u16, u16) {
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, b) = (
        allowed.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    allowed.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    (allowed, other, a, b)
}

/// What each connection accepted on `listener` (until none is waiting) carried first.
fn accepted(listener: &TcpListener) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok((mut stream, _)) = listener.accept() {
        use std::io::Read;
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut buffer = [0u8; 64];
        let n = stream.read(&mut buffer).unwrap_or(0);
        out.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
    }
    out
}

fn expect(out: &str, allowed: &TcpListener, other: &TcpListener) {
    for line in [
        "allowed 0".to_string(),
        format!("other {}", libc::EACCES),
        format!("fastopen-sendto {}", libc::EPERM),
        format!("fastopen-sendmsg {}", libc::EPERM),
        "deferred-connect 0".to_string(),
        format!("deferred-without-connect {}", libc::EPIPE),
        format!("udp {}", libc::EPERM),
        format!("bind {}", libc::EACCES),
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in:\n{out}");
    }
    let reached = accepted(allowed);
    println!("the allowed port received: {reached:?}");
    assert!(
        reached.len() == 2 && reached.contains(&"deferred".to_string()),
        "the allowed port got the plain and the deferred connection: {reached:?}"
    );
    let escaped = accepted(other);
    assert!(
        escaped.is_empty(),
        "connections reached the port not listed: {escaped:?}"
    );
}

#[test]
fn verbd_exec_connects_only_to_the_listed_tcp_port() {
    if !require_root("verbd_exec_connects_only_to_the_listed_tcp_port") {
        return;
    }
    let (allowed, other, a, b) = listeners();
    let dir = open_tempdir();
    let probe = dir.path().join("probe.py");
    std::fs::write(&probe, PROBE).unwrap();
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox {
            network: Some(NetworkMode::Ports {
                connect_tcp: vec![a],
            }),
            ..Sandbox::new(
                &["/usr", "/lib", "/etc", "/bin", dir.path().to_str().unwrap()],
                &[],
            )
        },
    );
    let run = |confined: bool| {
        let mut cmd = if confined {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--print-status", "--policy"])
                .arg(&policy)
                .args(["--profile", "agent", "--", PYTHON]);
            cmd
        } else {
            Command::new(PYTHON)
        };
        cmd.arg(&probe)
            .args([a.to_string(), b.to_string()])
            .uid(UID)
            .gid(UID)
            .current_dir("/");
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        text
    };
    let control = run(false);
    println!("control:\n{control}");
    assert!(control.contains("allowed 0") && control.contains("other 0"));
    assert!(control.contains("fastopen-sendto 0") && control.contains("fastopen-sendmsg 0"));
    assert!(control.contains("udp 0") && control.contains("bind 0"));
    assert!(!accepted(&allowed).is_empty());
    let reached = accepted(&other);
    println!("control: the other port received {reached:?}");
    for escaped in ["ESCAPED-sendto", "ESCAPED-sendmsg"] {
        assert!(reached.contains(&escaped.to_string()), "{reached:?}");
    }

    let confined = run(true);
    println!("confined:\n{confined}");
    assert!(
        confined.contains(&format!(
            "network: TCP connect to ports [{a}] only (Landlock)"
        )),
        "{confined}"
    );
    expect(&confined, &allowed, &other);
}

#[test]
fn a_verb_connects_only_to_its_listed_tcp_port() {
    if !require_root("a_verb_connects_only_to_its_listed_tcp_port") {
        return;
    }
    let (allowed, other, a, b) = listeners();
    let probe = [
        PYTHON,
        "@DIR@/probe/probe.py",
        &a.to_string(),
        &b.to_string(),
    ];
    let policy = Policy::new()
        .allow_root()
        .agents("me", &[0])
        .sandbox(
            "db",
            Sandbox {
                network: Some(NetworkMode::Ports {
                    connect_tcp: vec![a],
                }),
                ..Sandbox::new(&["/usr", "/lib", "/etc", "/bin", "@DIR@/probe"], &[])
            },
        )
        .verb(
            "probe",
            Verb::argv(Category::ReadOnly, &probe)
                .description("tries the ports")
                .roles(&["me"])
                .sandbox("db")
                .allow_interpreter(),
        )
        .render();
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("probe")).unwrap();
        std::fs::write(dir.join("probe/probe.py"), PROBE).unwrap();
    });
    let response = daemon.call("probe", &[]);
    let out = stdout_of(&response);
    println!("verb:\n{out}\n{response:?}");
    expect(&out, &allowed, &other);
}
