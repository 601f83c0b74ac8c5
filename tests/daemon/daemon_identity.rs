//! Root + `daemon.user` + a `run_as` profile: `policy/example.toml`'s own PostgreSQL set-up
//! (its `[daemon]`, its secrets, the narrowed PostgreSQL pack and its `run_as = { user =
//! "postgres" }` profile) served by a daemon started as root, with real uids: the daemon user
//! `verbd` and the agent and approver accounts exist only in a private copy of /etc/passwd and
//! /etc/group, bind-mounted in the daemon's own mount namespace.
//!
//! The daemon keeps CAP_SETUID/CAP_SETGID/CAP_SETPCAP for `run_as` and nothing else, runs under
//! its identity guard (no_new_privs, seccomp), a verb of the profile runs as `postgres`, and a
//! reload cannot widen the ids the guard allows.
//!
//! Without `CAP_KILL` such a daemon still ends a `run_as` child of another uid and its process
//! group — at its timeout and when its caller goes away — and says "timed out" only for a group
//! that was killed.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use common::policy::{Category, Policy, RunAs, Sandbox, Verb};
use verbd::protocol::{Request, Response};

const DAEMON: u32 = 62710;
const AGENTS: u32 = 62711;
const APPROVERS: u32 = 62712;
const AGENT: u32 = 62720;
const APPROVER: u32 = 62721;
/// A uid the start policy never names: a reload must not make the daemon able to take it.
const STRANGER: u32 = 62730;

struct Serving {
    child: Child,
    log: PathBuf,
}

impl Serving {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// The example policy with its sockets and state dir moved into `dir`, only its PostgreSQL
/// include, and one verb that prints the identity a child of the `run_as` profile gets.
fn example_postgres_policy(dir: &Path, run_as: &str) -> String {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/example.toml"))
            .unwrap();
    let start = example.find("include = [").unwrap();
    let end = start + example[start..].find("\n]\n").unwrap() + 3;
    let postgres = example[start..end]
        .lines()
        .find(|l| l.contains("packs/postgresql.toml"))
        .unwrap();
    let mut policy = format!(
        "{}include = [\n{postgres}\n]\n{}",
        &example[..start],
        &example[end..]
    );
    for (from, to) in [
        ("/run/verbd/verbd.sock", dir.join("verbd.sock")),
        ("/run/verbd/approve.sock", dir.join("approve.sock")),
        (
            "\"/var/lib/verbd\"",
            PathBuf::from(format!("\"{}\"", dir.join("state").display())),
        ),
        ("run_as = { user = \"postgres\" }", PathBuf::from(run_as)),
    ] {
        assert!(policy.contains(from), "example.toml no longer has {from}");
        policy = policy.replace(from, to.to_str().unwrap());
    }
    policy.push_str(
        r#"
[verb.whoami-run-as]
description = "The identity of a child of the run_as profile"
category = "read-only"
roles = ["agent"]
sandbox = "pack-psql-local"
command = "/usr/bin/id"
"#,
    );
    policy
}

/// Copies of /etc/passwd and /etc/group with the package's accounts and the test's people.
fn accounts(dir: &Path) -> (PathBuf, PathBuf) {
    let passwd = dir.join("passwd");
    let group = dir.join("group");
    let mut users = std::fs::read_to_string("/etc/passwd").unwrap();
    users.push_str(&format!(
        "verbd:x:{DAEMON}:{DAEMON}:verbd:/nonexistent:/usr/sbin/nologin\n\
         dc-agent:x:{AGENT}:{AGENTS}::/nonexistent:/usr/sbin/nologin\n\
         dc-approver:x:{APPROVER}:{APPROVERS}::/nonexistent:/usr/sbin/nologin\n"
    ));
    let mut groups = std::fs::read_to_string("/etc/group").unwrap();
    groups.push_str(&format!(
        "verbd:x:{DAEMON}:\nverbd-agents:x:{AGENTS}:dc-agent\nverbd-approvers:x:{APPROVERS}:dc-approver\n"
    ));
    std::fs::write(&passwd, users).unwrap();
    std::fs::write(&group, groups).unwrap();
    (passwd, group)
}

fn serve(dir: &Path, policy: &Path, credentials: &Path) -> Serving {
    let (passwd, group) = accounts(dir);
    let log = dir.join("serve.log");
    // Only the test harness uses a shell: to bind the account files in the daemon's namespace.
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(r#"mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@""#)
        .arg("sh")
        .arg(&passwd)
        .arg(&group)
        .arg(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(policy)
        .env("CREDENTIALS_DIRECTORY", credentials)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let serving = Serving { child, log };
    let socket = dir.join("verbd.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut serving = serving;
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = serving.child.try_wait() {
            panic!(
                "the example's PostgreSQL set-up did not serve ({status}):\n{}",
                serving.log()
            );
        }
        assert!(Instant::now() < deadline, "no socket:\n{}", serving.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    serving
}

fn cli_as(uid: u32, gid: u32, socket: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .env("VERBD_SOCKET", socket)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap()
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} missing"))
        .trim()
        .to_string()
}

#[test]
fn the_example_postgres_set_up_serves_as_verbd_with_only_the_run_as_path() {
    if !common::require_root("daemon_identity (root, daemon.user, run_as)") {
        return;
    }
    let Some(postgres) = nix::unistd::User::from_name("postgres").ok().flatten() else {
        common::skip::skip_or_fail(
            "daemon_identity",
            "no `postgres` account (install the postgresql package)",
        );
        return;
    };
    let dir = common::open_tempdir();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/packs"),
        dir.path().join("packs"),
    )
    .unwrap();
    // systemd hands LoadCredential= files to the service user in a private directory.
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("pg_password"), "pg-password-for-the-test").unwrap();
    std::fs::write(credentials.join("kubeconfig"), "apiVersion: v1\n").unwrap();
    for entry in ["", "pg_password", "kubeconfig"] {
        let path = credentials.join(entry);
        std::os::unix::fs::chown(&path, Some(DAEMON), Some(DAEMON)).unwrap();
        let mode = if entry.is_empty() { 0o700 } else { 0o400 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        example_postgres_policy(dir.path(), "run_as = { user = \"postgres\" }"),
    )
    .unwrap();

    let serving = serve(dir.path(), &policy, &credentials);
    assert!(
        serving.log().contains("self-test passed"),
        "{}",
        serving.log()
    );

    // The daemon is verbd, holds exactly CAP_SETGID, CAP_SETUID and CAP_SETPCAP (bits 6, 7, 8),
    // nothing inheritable or ambient, and runs under no_new_privs and its seccomp guard.
    let pid = serving.child.id();
    for field in ["Uid", "Gid"] {
        assert_eq!(
            status_field(pid, field)
                .split_whitespace()
                .collect::<Vec<_>>(),
            vec![DAEMON.to_string(); 4],
            "{field}"
        );
    }
    for (field, want) in [
        ("CapPrm", "00000000000001c0"),
        ("CapEff", "00000000000001c0"),
        ("CapBnd", "00000000000001c0"),
        ("CapInh", "0000000000000000"),
        ("CapAmb", "0000000000000000"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ] {
        assert_eq!(status_field(pid, field), want, "{field}");
    }

    // The run_as path works: a verb of the profile runs as postgres, with no groups but its own.
    let socket = dir.path().join("verbd.sock");
    let out = cli_as(AGENT, AGENTS, &socket, &["call", "whoami-run-as"]);
    assert!(out.status.success(), "{out:?}\n{}", serving.log());
    let id = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        id.starts_with(&format!(
            "uid={}(postgres) gid={}",
            postgres.uid, postgres.gid
        )),
        "{id}"
    );

    // A reload that names a uid the daemon did not start with is refused, loudly and with the
    // fix; the old policy keeps serving.
    std::fs::write(
        &policy,
        example_postgres_policy(
            dir.path(),
            &format!("run_as = {{ user = \"{STRANGER}\", group = \"{STRANGER}\" }}"),
        ),
    )
    .unwrap();
    let approve = dir.path().join("approve.sock");
    let out = cli_as(APPROVER, APPROVERS, &approve, &["reload"]);
    let answer =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{answer}");
    assert!(
        answer.contains(&format!(
            "run_as uid {STRANGER} gid {STRANGER} is not one this daemon may switch to"
        )) && answer.contains("restart the daemon"),
        "{answer}\n{}",
        serving.log()
    );
    let out = cli_as(AGENT, AGENTS, &socket, &["call", "whoami-run-as"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(&format!("uid={}(postgres)", postgres.uid)),
        "{out:?}"
    );
}

/// The uid the lingering verbs run as (`run_as`): no account names it, the daemon is not it.
const LINGERER: u32 = 62740;

/// A daemon started as root that drops to `nobody` and keeps only what `run_as` needs, with
/// verbs of a `run_as` profile that would run far past their 2 s timeout: `linger` (its program
/// sleeps `sleeps[0]` s) and `linger-in-group` (a shell that leaves a background sleep of
/// `sleeps[1]` s in its process group, then sleeps `sleeps[2]` s itself); and `wait-in-group`,
/// the same shell with a timeout of 60 s, for a caller that goes away.
fn lingering_policy(sleeps: &[String; 3]) -> String {
    let verb = |argv: &[&str], description: &str, timeout: &str| {
        Verb::argv(Category::ReadOnly, argv)
            .description(description)
            .roles(&["me"])
            .sandbox("as-other")
            .timeout(timeout)
    };
    let group = format!("/bin/sleep {} & /bin/sleep {}", sleeps[1], sleeps[2]);
    Policy::new()
        .daemon_user("nobody")
        .agents("me", &[0])
        .sandbox(
            "as-other",
            Sandbox {
                run_as: Some(RunAs {
                    user: LINGERER.to_string(),
                }),
                ..Sandbox::new(&["/usr", "/bin", "/lib", "/lib64", "/etc"], &[])
            },
        )
        .verb(
            "linger",
            verb(&["/bin/sleep", &sleeps[0]], "sleeps past its timeout", "2s"),
        )
        .verb(
            "linger-in-group",
            verb(
                &["/bin/sh", "-c", &group],
                "sleeps past its timeout, with a background sleep in its group",
                "2s",
            )
            .allow_interpreter(),
        )
        .verb(
            "wait-in-group",
            verb(
                &["/bin/sh", "-c", &group],
                "sleeps, with a background sleep in its group",
                "60s",
            )
            .allow_interpreter(),
        )
        .render()
}

/// Sleep lengths no other process uses (this test process's pid in the fraction), so the
/// processes of one verb are found by their command line: about 40 s, far past the timeout.
fn unique_sleeps() -> [String; 3] {
    let tag = std::process::id();
    [41, 42, 43].map(|whole| format!("{whole}.{tag:07}"))
}

/// Started as root, dropped to `nobody` with only CAP_SETGID, CAP_SETUID and CAP_SETPCAP (no
/// CAP_KILL): the set-up `run_as` has in production.
/// `env` is the daemon's added environment (a test hook).
fn start_lingering(sleeps: &[String; 3], env: &[(&str, &str)]) -> Option<common::Daemon> {
    if !common::require_root("run_as children killed without CAP_KILL") {
        return None;
    }
    let daemon = common::Daemon::spawn_in(common::open_tempdir(), &lingering_policy(sleeps), env);
    daemon.wait_ready();
    let pid = daemon.child.as_ref().unwrap().id();
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("a `nobody` account")
        .uid
        .as_raw();
    assert_eq!(
        status_field(pid, "Uid")
            .split_whitespace()
            .collect::<Vec<_>>(),
        vec![nobody.to_string(); 4]
    );
    for field in ["CapPrm", "CapEff"] {
        assert_eq!(status_field(pid, field), "00000000000001c0", "{field}");
    }
    Some(daemon)
}

/// The process running `sleep LENGTH`: found within 10 s, and running as the `run_as` uid.
fn running_sleep(length: &str, daemon: &common::Daemon) -> u32 {
    let needle = format!("sleep {length}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(&pid) = common::processes_matching(&needle).first() {
            let uid = status_field(pid as u32, "Uid");
            assert!(
                uid.split_whitespace().all(|id| id == LINGERER.to_string()),
                "{needle} runs as {uid}, not as the run_as uid {LINGERER}"
            );
            return pid as u32;
        }
        assert!(
            Instant::now() < deadline,
            "{needle} never started:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process group of `pid` (field 5 of its stat, after the command's parenthesis).
fn group_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// The live (not zombie) processes of process group `group`, as `pid command line`.
fn live_members(group: u32) -> Vec<String> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2) == Some(&group.to_string().as_str()) && fields.first() != Some(&"Z") {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            members.push(format!(
                "{pid} {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    members
}

/// Every process of `group` ended within 5 s.
fn assert_group_ended(group: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live_members(group).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        live_members(group),
        Vec::<String>::new(),
        "{what}: the run_as child's process group lives on"
    );
}

fn call_request(verb: &str) -> Request {
    Request::Call {
        verb: verb.into(),
        args: Default::default(),
        reason: None,
        idempotency_key: None,
        stream: None,
    }
}

/// A `run_as` verb whose program runs far past its 2 s timeout, served by a daemon without
/// CAP_KILL: the answer comes well within 10 s (a correctness bound: the timeout holds), says
/// timed out, and no process of the child's group is left — neither the program nor the
/// background sleep its shell left in the group.
#[test]
fn a_run_as_child_past_its_timeout_is_killed_with_its_group_by_a_daemon_without_cap_kill() {
    let sleeps = unique_sleeps();
    let Some(daemon) = start_lingering(&sleeps, &[]) else {
        return;
    };
    for (verb, watched) in [("linger", &sleeps[0]), ("linger-in-group", &sleeps[1])] {
        let socket = daemon.socket.clone();
        let started = Instant::now();
        let answer = std::thread::spawn(move || {
            verbd::client::request(&socket, &call_request(verb), Duration::from_secs(60))
        });
        let group = group_of(running_sleep(watched, &daemon));
        let answer = answer.join().unwrap().unwrap();
        let took = started.elapsed();
        println!("{verb}: answered after {took:?}: {answer:?}");
        match &answer {
            Response::Ok { result, .. } => assert!(result.exit.timed_out, "{verb}: {result:?}"),
            other => panic!("{verb}: {other:?}\n{}", daemon.log()),
        }
        assert!(
            took < Duration::from_secs(10),
            "{verb}: a 2 s timeout answered after {took:?}"
        );
        assert_group_ended(group, verb);
    }
}

/// A caller that goes away while its `run_as` verb runs (a 60 s timeout): the call is cancelled
/// and the child's whole group killed by a daemon without CAP_KILL within 5 s, long before its
/// timeout or the program's end.
#[test]
fn a_run_as_child_whose_caller_went_away_is_killed_with_its_group_by_a_daemon_without_cap_kill() {
    use std::io::Write;
    let sleeps = unique_sleeps();
    let Some(daemon) = start_lingering(&sleeps, &[]) else {
        return;
    };
    let mut caller = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    caller
        .write_all(&verbd::protocol::encode_request(&call_request(
            "wait-in-group",
        )))
        .unwrap();
    let group = group_of(running_sleep(&sleeps[1], &daemon));
    running_sleep(&sleeps[2], &daemon);
    drop(caller);
    assert_group_ended(group, "after its caller went away");
}

/// The same timeout with the kill kept to the daemon's own identity (the test hook
/// `VERBD_TEST_KILL_AS_DAEMON_ONLY`, as on the code before): the kill fails with EPERM, and the
/// answer says so — an error naming the group that could not be killed and may still run, the
/// journal's result carries it — never `timed_out`, never "killed". The test, root, ends the
/// sleeps itself.
#[test]
fn a_run_as_group_that_could_not_be_killed_is_never_reported_killed() {
    let sleeps = unique_sleeps();
    let Some(daemon) = start_lingering(
        &sleeps,
        &[(verbd::test_hooks::KILL_AS_DAEMON_ONLY_ENV, "1")],
    ) else {
        return;
    };
    let answer = daemon.call("linger", &[]);
    let leftovers = common::processes_matching(&format!("sleep {}", sleeps[0]));
    for pid in &leftovers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    match &answer {
        Response::Error { message } => assert!(
            message.contains("process group could not be killed")
                && message.contains("Operation not permitted")
                && message.contains("may still be running"),
            "{message}"
        ),
        other => panic!("a group that was not killed answered as {other:?}"),
    }
    assert!(
        !leftovers.is_empty(),
        "the sleep had ended: nothing shows the kill failed"
    );
    let result = daemon
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "result" && e["verb"] == "linger")
        .expect("a result record");
    assert_ne!(result["timed_out"], true, "{result}");
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("could not be killed")),
        "{result}"
    );
    assert!(
        daemon.log().contains("could not be killed"),
        "{}",
        daemon.log()
    );
}
