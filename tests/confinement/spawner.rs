//! The spawner process (module `verbd::spawner`): the daemon's sandboxed children are forked by a
//! small single-threaded process, never by the daemon; it has the daemon's identity and nothing
//! more; a spawner that dies is restarted, and the call it held ends as failed with its outcome
//! unknown — never run twice, always journaled, the journal still verifying, also when it is
//! killed at random moments while calls run; and a child it forked but could not report is
//! killed and reaped by the daemon, never left running or as a zombie.
use crate::common;
use common::policy::{Category, Param, Policy, RunAs, Sandbox, Verb};
use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response};

/// `hello`, for root, from a daemon that drops to `nobody`.
fn policy() -> String {
    Policy::new()
        .daemon_user("nobody")
        .agents("me", &[0])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello {n}")
                .description("says hello")
                .roles(&["me"])
                .param("n", Param::int(0, 1_000_000)),
        )
        .render()
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out
}

/// The daemon's spawner: its one child whose command line is `… __spawner`.
fn spawner_of(daemon: &Daemon) -> Option<u32> {
    spawner_of_pid(daemon.child.as_ref().unwrap().id())
}

fn spawner_of_pid(daemon: u32) -> Option<u32> {
    children(daemon).into_iter().find(|child| {
        std::fs::read(format!("/proc/{child}/cmdline"))
            .map(|c| c.split(|b| *b == 0).any(|arg| arg == b"__spawner"))
            .unwrap_or(false)
    })
}

fn status_field(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn hello(daemon: &Daemon, n: u32) -> Response {
    daemon.call("hello", &[("n", &n.to_string())])
}

#[test]
fn the_daemon_runs_its_children_through_a_single_threaded_spawner_with_its_identity() {
    if !require_root("spawner identity") {
        return;
    }
    let daemon = Daemon::start(&policy());
    let spawner = spawner_of(&daemon).expect("the daemon has a spawner process");
    let daemon_pid = daemon.child.as_ref().unwrap().id();
    assert_eq!(status_field(spawner, "Threads"), "1");
    for field in [
        "Uid",
        "Gid",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
    ] {
        assert_eq!(
            status_field(spawner, field),
            status_field(daemon_pid, field),
            "{field}: the spawner has exactly the daemon's"
        );
    }
    // A stopped spawner holds the call: the daemon does not fork the child itself.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let socket = daemon.socket.clone();
    let held = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &Request::Call {
                verb: "hello".into(),
                args: [("n".to_string(), serde_json::Value::from("1"))]
                    .into_iter()
                    .collect(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
    });
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !held.is_finished(),
        "the call ran while the spawner was stopped"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    assert_eq!(stdout_of(&held.join().unwrap().unwrap()), "hello 1\n");
}

#[test]
fn a_killed_spawner_is_restarted_and_the_call_it_held_fails_once_and_is_journaled() {
    if !require_root("spawner restart") {
        return;
    }
    let daemon = Daemon::start(&policy());
    let first = spawner_of(&daemon).unwrap();
    let kill = |pid: u32, signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap()
    };
    // Killed while idle: the next call finds it gone before sending a byte and restarts it.
    kill(first, nix::sys::signal::Signal::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(stdout_of(&hello(&daemon, 2)), "hello 2\n");
    let second = spawner_of(&daemon).expect("a new spawner");
    assert_ne!(second, first);
    // Killed while it holds an order (stopped, so the order waits unread in its socket).
    kill(second, nix::sys::signal::Signal::SIGSTOP);
    let socket = daemon.socket.clone();
    let held = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &Request::Call {
                verb: "hello".into(),
                args: [("n".to_string(), serde_json::Value::from("3"))]
                    .into_iter()
                    .collect(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    kill(second, nix::sys::signal::Signal::SIGKILL);
    match held.join().unwrap().unwrap() {
        Response::Error { message } => assert!(
            message.contains("spawner") && message.contains("unknown"),
            "{message}"
        ),
        other => panic!("the held call should fail with its outcome unknown: {other:?}"),
    }
    assert_eq!(stdout_of(&hello(&daemon, 4)), "hello 4\n");
    let third = spawner_of(&daemon).expect("restarted again");
    assert!(third != first && third != second);
    // Every call journaled exactly once with its end; the journal verifies.
    let events = daemon.journal_events();
    let execs: Vec<_> = events.iter().filter(|e| e["kind"] == "exec").collect();
    let results: Vec<_> = events.iter().filter(|e| e["kind"] == "result").collect();
    assert_eq!(execs.len(), 3, "{events:#?}");
    assert_eq!(results.len(), 3, "{events:#?}");
    let failed: Vec<_> = results.iter().filter(|r| !r["error"].is_null()).collect();
    assert_eq!(failed.len(), 1, "only the held call failed: {results:#?}");
    let verify = daemon.cli(&[
        "audit",
        "verify",
        "--state-dir",
        daemon.state.to_str().unwrap(),
    ]);
    assert!(verify.status.success(), "{verify:?}");
}

/// `mark`, which makes one directory per run beneath `runs`.
fn torture_policy() -> String {
    torture_policy_on(Policy::new().allow_root(), None)
}

/// The uid the `run_as` variant's children run as: not the daemon's (`nobody`).
const ORPHAN_RUN_AS: u32 = 62750;

/// The torture policy's verbs on `base`, their profile running as `run_as` when given.
fn torture_policy_on(base: Policy, run_as: Option<u32>) -> String {
    base.agents("me", &[0])
        .sandbox(
            "runs",
            Sandbox {
                run_as: run_as.map(|uid| RunAs {
                    user: uid.to_string(),
                }),
                ..Sandbox::new(&["/usr", "/bin", "/lib", "/lib64", "/etc"], &["@DIR@/runs"])
            },
        )
        .verb(
            "mark",
            Verb::command(Category::ReadOnly, "/usr/bin/mkdir @DIR@/runs/{n}")
                .description("each run leaves one directory; a second run of the same n would fail")
                .roles(&["me"])
                .sandbox("runs")
                .param("n", Param::int(0, 100_000_000)),
        )
        .verb(
            "late",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    "/usr/bin/sleep 30 & /usr/bin/sleep 3; exec /usr/bin/mkdir @DIR@/runs/late",
                ],
            )
            .allow_interpreter()
            .description("starts a 30 s sleep in its group, and after 3 s leaves a directory")
            .roles(&["me"])
            .sandbox("runs"),
        )
        .render()
}

/// The daemon's children other than its one spawner (`pid state command line`): every process
/// whose parent is the daemon, alive or a zombie, once the calls have ended. Waits up to 5 s
/// for them to go (a killed child is reaped on a thread of its own).
fn strays(daemon: u32) -> Vec<String> {
    let scan = || {
        let mut spawners = 0;
        let mut strays = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            if field("PPid") != daemon.to_string() {
                continue;
            }
            let state = field("State");
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let spawner = cmdline.split(|b| *b == 0).any(|arg| arg == b"__spawner");
            if spawner && !state.starts_with('Z') && spawners == 0 {
                spawners += 1;
                continue;
            }
            strays.push(format!(
                "{pid} {state} {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
        strays
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = scan();
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The live processes of process group `group` (`pid command line`).
fn group_members(group: u32) -> Vec<String> {
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
        // State and process group: fields 3 and 5, after the command name's parenthesis.
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

/// The spawner is SIGKILLed after it forked a call's child and before it answered (held there
/// by the `VERBD_TEST_SPAWNER_PAUSE` hook), so the daemon never hears the child's pid from it.
/// The call ends as failed with its outcome unknown; the child — a shell that starts a 30 s
/// sleep in its process group and would leave a directory after 3 s — is killed with its group
/// and reaped by the daemon: no process of it is left, alive or a zombie, and the directory
/// never appears; the journal verifies and the next call runs on a new spawner.
#[test]
fn a_child_forked_by_a_spawner_killed_before_it_answered_is_killed_and_reaped() {
    if !require_root("spawner killed between fork and answer") {
        return;
    }
    orphan_is_killed_and_reaped(&torture_policy(), None);
}

/// The same, from a daemon dropped to `nobody` that keeps only what `run_as` needs (no
/// `CAP_KILL`), whose child runs as another uid: it is killed all the same.
#[test]
fn a_run_as_child_forked_by_a_spawner_killed_before_it_answered_is_killed_and_reaped() {
    if !require_root("run_as child of a spawner killed between fork and answer") {
        return;
    }
    orphan_is_killed_and_reaped(
        &torture_policy_on(Policy::new().daemon_user("nobody"), Some(ORPHAN_RUN_AS)),
        Some(ORPHAN_RUN_AS),
    );
}

/// The orphan test on `policy`; its children write as `run_as` (root when `None`), and the
/// spawner, as the daemon user, writes the pause hook's files.
fn orphan_is_killed_and_reaped(policy: &str, run_as: Option<u32>) {
    let dir = open_tempdir();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let hook = dir.path().join("hook");
    std::fs::create_dir(&hook).unwrap();
    if let Some(uid) = run_as {
        std::os::unix::fs::chown(&runs, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let daemon = Daemon::spawn_in(
        dir,
        policy,
        &[("VERBD_TEST_SPAWNER_PAUSE", hook.to_str().unwrap())],
    );
    daemon.wait_ready();
    let daemon_pid = daemon.child.as_ref().unwrap().id();
    let spawner = spawner_of(&daemon).expect("the daemon has a spawner process");
    std::fs::write(hook.join("arm"), b"").unwrap();
    let socket = daemon.socket.clone();
    let held = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &Request::Call {
                verb: "late".into(),
                args: BTreeMap::new(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(60),
        )
    });
    let forked = hook.join("forked");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !forked.exists() {
        assert!(
            Instant::now() < deadline,
            "the spawner never forked; log:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let child: u32 = std::fs::read_to_string(&forked)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The child runs its program meanwhile (it does not wait for the spawner's answer): the
    // spawner is killed once the program has started its background sleep.
    let deadline = Instant::now() + Duration::from_secs(2);
    while group_members(child).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the verb's group never grew: {:?}",
            group_members(child)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(uid) = run_as {
        let ids = status_field(child, "Uid");
        assert!(
            ids.split_whitespace().all(|id| id == uid.to_string()),
            "the child runs as {ids}, not as the run_as uid {uid}"
        );
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    match held.join().unwrap().unwrap() {
        Response::Error { message } => assert!(
            message.contains("spawner") && message.contains("unknown"),
            "{message}"
        ),
        other => panic!("the call should fail with its outcome unknown: {other:?}"),
    }
    let left = strays(daemon_pid);
    assert!(
        left.is_empty(),
        "the daemon's children besides its spawner, after the call (its child was {child}): \
         {left:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !group_members(child).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        group_members(child),
        Vec::<String>::new(),
        "the orphaned child's process group lives on"
    );
    // Past the moment the shell would have made its directory.
    let forked_at = std::fs::metadata(&forked).unwrap().modified().unwrap();
    let since = forked_at.elapsed().unwrap_or_default();
    std::thread::sleep(Duration::from_secs(4).saturating_sub(since));
    let late = daemon.path("runs/late");
    assert!(
        !late.exists(),
        "the orphaned child ran on and made {late:?}"
    );
    match mark(&daemon.socket, 1) {
        Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0), "{result:?}"),
        other => panic!("the next call: {other:?}"),
    }
    let next = spawner_of(&daemon).expect("a new spawner");
    assert_ne!(next, spawner);
    let left = strays(daemon_pid);
    assert!(left.is_empty(), "after the next call: {left:?}");
    let verify = daemon.cli(&[
        "audit",
        "verify",
        "--state-dir",
        daemon.state.to_str().unwrap(),
    ]);
    assert!(verify.status.success(), "{verify:?}");
}

/// How long the torture runs, and how many clients call meanwhile.
const TORTURE: Duration = Duration::from_secs(15);
const TORTURE_CLIENTS: usize = 4;

fn mark(socket: &Path, n: u32) -> Response {
    verbd::client::request(
        socket,
        &Request::Call {
            verb: "mark".into(),
            args: [("n".to_string(), serde_json::Value::from(n.to_string()))]
                .into_iter()
                .collect(),
            reason: None,
            idempotency_key: None,
            stream: None,
        },
        Duration::from_secs(60),
    )
    .unwrap()
}

/// The spawner process while calls run. A child it forked shows the spawner's command line until
/// its `execve`, and is the daemon's child too (`CLONE_PARENT`): the spawner is the oldest of
/// them (a child of a spawner killed just before can still be older than its successor; the
/// torture then kills that child instead, which ends its call as killed by `SIGKILL`).
fn current_spawner(daemon: u32) -> Option<u32> {
    let started = |pid: u32| -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Field 22, counted after the command name's closing parenthesis (field 2).
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(19)?
            .parse()
            .ok()
    };
    children(daemon)
        .into_iter()
        .filter(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|arg| arg == b"__spawner"))
                .unwrap_or(false)
        })
        .filter_map(|child| Some((started(child)?, child)))
        .min()
        .map(|(_, child)| child)
}

/// Random pauses (xorshift64*; the seed is printed, `VERBD_TORTURE_SEED` replays one).
struct Pauses(u64);

impl Pauses {
    fn next(&mut self, below_ms: u64) -> Duration {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        Duration::from_millis(self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % below_ms)
    }
}

/// Clients call without pause while the spawner is SIGKILLed at random moments. Every call is
/// answered, either as run or as failed with its outcome unknown; none runs twice (the verb is
/// `mkdir`, which fails on a second run of the same `n`); every call answered as run left its
/// directory and no directory appears for a call never made; the journal holds exactly one
/// `exec` and one `result` record per call, the failed ones exactly the unknown ones and the
/// children killed before their first step, and it verifies. The daemon serves normally
/// afterwards, and has no child but its spawner: none left running, no zombie.
#[test]
fn the_spawner_killed_at_random_moments_loses_nothing_and_runs_nothing_twice() {
    if !require_root("spawner torture") {
        return;
    }
    let daemon = Daemon::start_with(&torture_policy(), |dir| {
        std::fs::create_dir(dir.join("runs")).unwrap();
    });
    let runs = daemon.dir.path().join("runs");
    let daemon_pid = daemon.child.as_ref().unwrap().id();
    let seed = std::env::var("VERBD_TORTURE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("spawner torture: VERBD_TORTURE_SEED={seed}");
    let next = AtomicU32::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (answers, kills) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..TORTURE_CLIENTS)
            .map(|_| {
                scope.spawn(|| {
                    let mut answers = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        answers.push((n, mark(&daemon.socket, n)));
                    }
                    answers
                })
            })
            .collect();
        let mut pauses = Pauses(seed);
        let mut kills = 0u32;
        while start.elapsed() < TORTURE {
            std::thread::sleep(pauses.next(100));
            if let Some(spawner) = current_spawner(daemon_pid) {
                let killed = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(spawner as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                kills += u32::from(killed.is_ok());
            }
        }
        stop.store(true, Ordering::Relaxed);
        let answers: Vec<(u32, Response)> = clients
            .into_iter()
            .flat_map(|client| client.join().unwrap())
            .collect();
        (answers, kills)
    });
    let calls = next.load(Ordering::Relaxed);
    assert_eq!(answers.len() as u32, calls, "every call was answered");

    let mut ran = Vec::new();
    let mut unknown = Vec::new();
    let mut killed = 0;
    let mut killed_first = 0;
    for (n, answer) in &answers {
        match answer {
            // A child taken for the spawner (see `current_spawner`): killed, not run twice.
            Response::Ok { result, .. } if result.exit.signal == Some(libc::SIGKILL) => killed += 1,
            // The same, killed before its first step (before it could report its pid).
            Response::Error { message } if message.contains("nothing was executed") => {
                killed_first += 1
            }
            Response::Ok { result, .. } => {
                assert_eq!(
                    result.exit.code,
                    Some(0),
                    "call {n} ran but its mkdir failed (a second run?): {result:?}"
                );
                ran.push(*n);
            }
            Response::Error { message }
                if message.contains("spawner") && message.contains("unknown") =>
            {
                unknown.push(*n)
            }
            other => panic!("call {n}: neither run nor unknown: {other:?}"),
        }
    }
    let made: Vec<u32> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|entry| {
            entry
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    for n in &ran {
        assert!(made.contains(n), "call {n} answered as run left nothing");
    }
    for n in &made {
        assert!(*n < calls, "a directory for call {n}, never made");
    }
    let unknown_that_ran = unknown.iter().filter(|n| made.contains(n)).count();

    // The journal: one exec and one result per call; the failed results are the unknown calls.
    let events = daemon.journal_events();
    let mut execs_per_n: BTreeMap<String, u32> = BTreeMap::new();
    for exec in events.iter().filter(|e| e["kind"] == "exec") {
        *execs_per_n
            .entry(exec["args"]["n"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(execs_per_n.len() as u32, calls, "one exec record per call");
    assert!(
        execs_per_n.values().all(|&count| count == 1),
        "no call journaled twice"
    );
    let results: Vec<_> = events.iter().filter(|e| e["kind"] == "result").collect();
    assert_eq!(results.len() as u32, calls, "one result record per call");
    let failed = results.iter().filter(|r| !r["error"].is_null()).count();
    assert_eq!(
        failed,
        unknown.len() + killed_first,
        "the failed results are the unknown calls and the children killed before their first step"
    );
    let verify = daemon.cli(&[
        "audit",
        "verify",
        "--state-dir",
        daemon.state.to_str().unwrap(),
    ]);
    assert!(verify.status.success(), "{verify:?}");
    eprintln!(
        "spawner torture: {calls} calls by {TORTURE_CLIENTS} clients in {:.1} s, {kills} spawner \
         kills, {} ran, {} unknown_outcome ({unknown_that_ran} of them had run), {killed} children \
         killed in place of the spawner (and {killed_first} before their first step), journal \
         verified",
        start.elapsed().as_secs_f64(),
        ran.len(),
        unknown.len(),
    );
    assert!(kills >= 20, "the spawner was killed only {kills} times");

    // Afterwards the daemon serves as before, and nothing is left of the killed spawners'
    // children: no zombie, nothing still running.
    match mark(&daemon.socket, calls) {
        Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0)),
        other => panic!("after the torture: {other:?}"),
    }
    let left = strays(daemon_pid);
    assert!(
        left.is_empty(),
        "after {kills} spawner kills, the daemon's children besides its spawner: {left:?}"
    );
}
