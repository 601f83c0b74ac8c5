//! verbd::sd against the real protocols: notifications are received on a real datagram socket
//! bound as `NOTIFY_SOCKET`, and sockets are passed by the real `systemd-socket-activate`.
//!
//! Both need a process whose environment the test controls, and `activated_sockets()` needs a
//! single-threaded one (it removes `LISTEN_*` from the environment). The libtest harness always
//! runs a test on a second thread, so the child is this test binary re-executed with
//! `VERBD_SD_TEST_CHILD=<scenario>`: a function in `.init_array` runs the scenario before libtest's
//! `main` (still single-threaded), prints one report line per fact on stdout and exits.
//!
//! `systemd-socket-activate` is required: under `CI=true` its absence fails the tests, otherwise
//! the activation tests skip loudly.
#[path = "common/skip.rs"]
mod skip;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};

const CHILD_SWITCH: &str = "VERBD_SD_TEST_CHILD";

// ---------------------------------------------------------------------------------------------
// Child side: runs before main when CHILD_SWITCH is set.

// SAFETY: `.init_array` holds pointers to `extern "C" fn()` that the dynamic loader calls before
// `main`; this static is exactly one such pointer, and `#[used]` keeps the linker from dropping it.
// `child_entry` returns at once unless CHILD_SWITCH is set, so normal test runs are unaffected.
#[used]
#[unsafe(link_section = ".init_array")]
static CHILD_ENTRY: extern "C" fn() = child_entry;

extern "C" fn child_entry() {
    let Some(scenario) = std::env::var_os(CHILD_SWITCH) else {
        return;
    };
    let code = match scenario.to_str() {
        Some("notify") => child_notify(),
        Some("watchdog") => child_watchdog(),
        Some("activation") => child_activation(),
        Some("activation-after-thread") => child_activation_after_thread(),
        other => {
            println!("unknown scenario {other:?}");
            2
        }
    };
    std::io::stdout().flush().expect("flush child report");
    std::process::exit(code);
}

fn child_notify() -> i32 {
    verbd::sd::notify_ready("self-test passed: 3 verbs, 2 profiles");
    verbd::sd::notify_status("policy reloaded\nREADY=1\r\nforged");
    verbd::sd::notify_reloading();
    verbd::sd::notify_watchdog();
    verbd::sd::notify_stopping();
    0
}

fn child_watchdog() -> i32 {
    match verbd::sd::watchdog_interval() {
        Some(interval) => println!("interval_us={}", interval.as_micros()),
        None => println!("interval=none"),
    }
    0
}

fn child_activation() -> i32 {
    let sockets = match verbd::sd::activated_sockets() {
        Ok(sockets) => sockets,
        Err(error) => {
            println!("error={error}");
            return 3;
        }
    };
    println!("count={}", sockets.len());
    for variable in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        println!("env {variable}={:?}", std::env::var_os(variable));
    }
    match verbd::sd::activated_sockets() {
        Ok(again) => println!("second_call_count={}", again.len()),
        Err(error) => println!("second_call_error={error}"),
    }
    for socket in &sockets {
        let fd = socket.listener.as_fd();
        let status = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).expect("F_GETFL"));
        let fd_flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD).expect("F_GETFD"));
        println!(
            "socket name={:?} nonblocking={} cloexec={}",
            socket.name,
            status.contains(OFlag::O_NONBLOCK),
            fd_flags.contains(FdFlag::FD_CLOEXEC)
        );
    }
    std::io::stdout().flush().expect("flush child report");
    // Serve one connection per listener so the parent sees the fds really are its sockets.
    for socket in &sockets {
        socket
            .listener
            .set_nonblocking(false)
            .expect("blocking accept");
        let (mut stream, _) = socket.listener.accept().expect("accept");
        let name = socket.name.as_deref().unwrap_or("-");
        stream.write_all(name.as_bytes()).expect("answer");
    }
    0
}

fn child_activation_after_thread() -> i32 {
    let (stop, wait) = std::sync::mpsc::channel::<()>();
    let helper = std::thread::spawn(move || wait.recv());
    let result = verbd::sd::activated_sockets();
    stop.send(()).expect("stop helper thread");
    helper.join().expect("join").expect("helper received");
    match result {
        Ok(sockets) => println!("count={}", sockets.len()),
        Err(error) => println!("error={error}"),
    }
    println!("env LISTEN_FDS={:?}", std::env::var_os("LISTEN_FDS"));
    0
}

// ---------------------------------------------------------------------------------------------
// Parent side.

fn test_binary() -> PathBuf {
    std::env::current_exe().expect("current_exe")
}

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The scenario child with a clean environment plus `vars`.
fn child_command(scenario: &str, vars: &[(&str, &str)]) -> Command {
    let mut command = Command::new(test_binary());
    command.env_clear().env(CHILD_SWITCH, scenario);
    for (key, value) in vars {
        command.env(key, value);
    }
    command
}

fn run_child(command: &mut Command) -> Output {
    let output = command.output().expect("run child");
    eprintln!(
        "child status {:?}\nstdout:\n{}stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn receive_all(receiver: &UnixDatagram) -> Vec<String> {
    receiver
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut datagrams = Vec::new();
    let mut buffer = vec![0u8; 65536];
    while let Ok(len) = receiver.recv(&mut buffer) {
        datagrams.push(String::from_utf8(buffer[..len].to_vec()).expect("utf-8 datagram"));
    }
    datagrams
}

fn assert_notify_sequence(datagrams: &[String]) {
    assert_eq!(datagrams.len(), 5, "datagrams: {datagrams:?}");
    assert_eq!(
        datagrams[0],
        "READY=1\nSTATUS=self-test passed: 3 verbs, 2 profiles\n"
    );
    assert_eq!(datagrams[1], "STATUS=policy reloaded READY=1  forged\n");
    let reloading: Vec<&str> = datagrams[2].lines().collect();
    assert_eq!(reloading.len(), 2, "{:?}", datagrams[2]);
    assert_eq!(reloading[0], "RELOADING=1");
    let usec = reloading[1]
        .strip_prefix("MONOTONIC_USEC=")
        .expect("MONOTONIC_USEC line");
    assert!(
        usec.parse::<u64>().expect("MONOTONIC_USEC is a number") > 0,
        "{usec}"
    );
    assert!(datagrams[2].ends_with('\n'));
    assert_eq!(datagrams[3], "WATCHDOG=1\n");
    assert_eq!(datagrams[4], "STOPPING=1\n");
}

#[test]
fn notifications_arrive_as_exact_datagrams_on_a_path_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let receiver = UnixDatagram::bind(&path).expect("bind notify socket");
    let output = run_child(&mut child_command(
        "notify",
        &[("NOTIFY_SOCKET", path.to_str().expect("utf-8 path"))],
    ));
    assert!(output.status.success());
    assert_notify_sequence(&receive_all(&receiver));
}

#[test]
fn notifications_arrive_on_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("verbd-sd-test-{}-{:?}", std::process::id(), Instant::now());
    let address =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("address");
    let receiver = UnixDatagram::bind_addr(&address).expect("bind abstract notify socket");
    let output = run_child(&mut child_command(
        "notify",
        &[("NOTIFY_SOCKET", &format!("@{name}"))],
    ));
    assert!(output.status.success());
    assert_notify_sequence(&receive_all(&receiver));
}

#[test]
fn notifications_are_silent_no_ops_without_notify_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let receiver = UnixDatagram::bind(&path).expect("bind notify socket");
    // No NOTIFY_SOCKET: the child must neither fail nor send anywhere. A sibling variable that
    // points at the socket makes sure the module does not read anything but NOTIFY_SOCKET.
    let output = run_child(&mut child_command(
        "notify",
        &[("NOTIFY_SOCKET_UNUSED", path.to_str().expect("utf-8 path"))],
    ));
    assert!(output.status.success());
    assert_eq!(receive_all(&receiver), Vec::<String>::new());
}

#[test]
fn watchdog_interval_is_half_the_managers_timeout_for_this_process_only() {
    let interval =
        |vars: &[(&str, &str)]| stdout_lines(&run_child(&mut child_command("watchdog", vars)));
    assert_eq!(
        interval(&[("WATCHDOG_USEC", "30000000")]),
        ["interval_us=15000000"]
    );
    assert_eq!(interval(&[]), ["interval=none"]);
    assert_eq!(interval(&[("WATCHDOG_USEC", "0")]), ["interval=none"]);
    assert_eq!(
        interval(&[("WATCHDOG_USEC", "30000000"), ("WATCHDOG_PID", "1")]),
        ["interval=none"]
    );
}

#[test]
fn not_activated_means_no_sockets() {
    let lines = stdout_lines(&run_child(&mut child_command("activation", &[])));
    assert_eq!(lines[0], "count=0");
}

#[test]
fn listen_variables_for_another_process_are_ignored_and_removed() {
    let output = run_child(&mut child_command(
        "activation",
        &[
            ("LISTEN_PID", "1"),
            ("LISTEN_FDS", "1"),
            ("LISTEN_FDNAMES", "agent"),
        ],
    ));
    assert!(output.status.success());
    assert_eq!(
        stdout_lines(&output),
        [
            "count=0",
            "env LISTEN_PID=None",
            "env LISTEN_FDS=None",
            "env LISTEN_FDNAMES=None",
            "second_call_count=0",
        ]
    );
}

#[test]
fn malformed_listen_pid_is_refused() {
    let output = run_child(&mut child_command(
        "activation",
        &[("LISTEN_PID", "not-a-pid"), ("LISTEN_FDS", "1")],
    ));
    assert_eq!(output.status.code(), Some(3));
    let lines = stdout_lines(&output);
    assert!(
        lines[0].starts_with("error=invalid socket-activation environment")
            && lines[0].contains("LISTEN_PID"),
        "{lines:?}"
    );
}

#[test]
fn activation_is_refused_once_threads_run() {
    let output = run_child(&mut child_command(
        "activation-after-thread",
        &[("LISTEN_PID", "1"), ("LISTEN_FDS", "1")],
    ));
    let lines = stdout_lines(&output);
    assert!(
        lines[0].starts_with("error=socket activation must be read before any thread starts")
            && lines[0].contains("has 2 threads"),
        "{lines:?}"
    );
    // Refused means untouched: nothing was removed behind other threads' backs.
    assert_eq!(lines[1], "env LISTEN_FDS=Some(\"1\")");
}

// ---------------------------------------------------------------------------------------------
// Real socket activation through systemd-socket-activate.

fn socket_activate_tool() -> Option<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/bin", "/bin", "/lib/systemd", "/usr/lib/systemd"].map(PathBuf::from));
    for dir in candidates {
        let tool = dir.join("systemd-socket-activate");
        if tool.is_file() {
            return Some(tool);
        }
    }
    if ci() {
        panic!("CI=true but systemd-socket-activate is not installed (package systemd)");
    }
    skip::announce(
        "SKIPPED socket-activation test: systemd-socket-activate not found. \
         Install systemd; under CI=true this is a failure.",
    );
    None
}

/// Starts `systemd-socket-activate ARGS… TESTBIN` with the activation scenario. It execs the test
/// binary on the first connection to any of its sockets.
fn spawn_activated(tool: &Path, args: &[&str]) -> Child {
    Command::new(tool)
        .args(args)
        .args(["-E", &format!("{CHILD_SWITCH}=activation")])
        .arg(test_binary())
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn systemd-socket-activate")
}

fn wait_for_path(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn finish(child: Child) -> (i32, Vec<String>, String) {
    let output = child.wait_with_output().expect("wait for activated child");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!(
        "activated child {:?}\nstdout:\n{}stderr:\n{stderr}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    (
        output.status.code().unwrap_or(-1),
        stdout_lines(&output),
        stderr,
    )
}

fn read_answer(mut stream: UnixStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read answer");
    answer
}

#[test]
fn named_unix_listeners_are_adopted_nonblocking_cloexec_and_served() {
    let Some(tool) = socket_activate_tool() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = dir.path().join("verbd.sock");
    let approver = dir.path().join("approve.sock");
    let child = spawn_activated(
        &tool,
        &[
            "-l",
            agent.to_str().expect("utf-8"),
            "-l",
            approver.to_str().expect("utf-8"),
            "--fdname=agent:approver",
        ],
    );
    wait_for_path(&agent);
    wait_for_path(&approver);
    // The first connection makes systemd-socket-activate exec the child; both queue until it
    // accepts them on the adopted listeners.
    let agent_stream = UnixStream::connect(&agent).expect("connect agent socket");
    let approver_stream = UnixStream::connect(&approver).expect("connect approver socket");
    assert_eq!(read_answer(agent_stream), "agent");
    assert_eq!(read_answer(approver_stream), "approver");
    let (code, lines, _) = finish(child);
    assert_eq!(code, 0);
    assert_eq!(
        lines,
        [
            "count=2",
            "env LISTEN_PID=None",
            "env LISTEN_FDS=None",
            "env LISTEN_FDNAMES=None",
            "second_call_count=0",
            "socket name=Some(\"agent\") nonblocking=true cloexec=true",
            "socket name=Some(\"approver\") nonblocking=true cloexec=true",
        ]
    );
}

#[test]
fn unnamed_listener_has_no_name() {
    let Some(tool) = socket_activate_tool() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("verbd.sock");
    let child = spawn_activated(&tool, &["-l", path.to_str().expect("utf-8")]);
    wait_for_path(&path);
    assert_eq!(
        read_answer(UnixStream::connect(&path).expect("connect")),
        "-"
    );
    let (code, lines, _) = finish(child);
    assert_eq!(code, 0);
    assert_eq!(lines[0], "count=1");
    assert_eq!(lines[5], "socket name=None nonblocking=true cloexec=true");
}

#[test]
fn datagram_socket_is_refused_with_a_clear_error() {
    let Some(tool) = socket_activate_tool() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dgram.sock");
    let child = spawn_activated(
        &tool,
        &["-d", "-l", path.to_str().expect("utf-8"), "--fdname=agent"],
    );
    wait_for_path(&path);
    let sender = UnixDatagram::unbound().expect("datagram");
    sender.send_to(b"wake", &path).expect("wake the activator");
    let (code, lines, _) = finish(child);
    assert_eq!(code, 3);
    assert_eq!(
        lines,
        [
            "error=inherited fd 3 (name \"agent\") cannot be served: its type is Datagram, not \
             Stream; verbd serves only listening AF_UNIX stream sockets (ListenStream=/path with \
             Accept=no in the .socket unit)"
        ]
    );
}

#[test]
fn tcp_socket_is_refused_with_a_clear_error() {
    let Some(tool) = socket_activate_tool() else {
        return;
    };
    // A free loopback port: bind port 0, note the port, release it for the activator.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("probe port")
        .local_addr()
        .expect("addr")
        .port();
    let address = format!("127.0.0.1:{port}");
    let child = spawn_activated(&tool, &["-l", &address]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(
            Instant::now() < deadline,
            "activator never listened on {address}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, lines, _) = finish(child);
    assert_eq!(code, 3);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "error=inherited fd 3 (unnamed) cannot be served: its address family is Inet, not Unix"
        ),
        "{lines:?}"
    );
}

#[test]
fn accepted_connection_is_refused_as_not_listening() {
    let Some(tool) = socket_activate_tool() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("accept.sock");
    // --accept forks one child per connection and hands it the connected socket (Accept=yes).
    // The activator keeps listening, so read the child's report line from the shared stdout pipe
    // and then stop the activator.
    let mut activator = spawn_activated(&tool, &["-a", "-l", path.to_str().expect("utf-8")]);
    let stdout = activator.stdout.take().expect("stdout pipe");
    let (line_sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line_sender.send(line).is_err() {
                break;
            }
        }
    });
    wait_for_path(&path);
    let _connection = UnixStream::connect(&path).expect("connect");
    let report = lines.recv_timeout(Duration::from_secs(10));
    activator.kill().expect("stop the activator");
    let (_, _, stderr) = finish(activator);
    assert_eq!(
        report.as_deref(),
        Ok(
            "error=inherited fd 3 (unnamed) cannot be served: it is not listening (a connection \
            passed by Accept=yes?); verbd serves only listening AF_UNIX stream sockets \
            (ListenStream=/path with Accept=no in the .socket unit)"
        ),
        "activator stderr: {stderr}"
    );
}
