//! One caller cannot starve the others (issue 12.2) and calls over the execution limit queue
//! fairly instead of getting `busy` at once (issue 16, lever 5). Each test is an attack by
//! hostile uids (forked children that dropped to uids 61100+) against a real `verbd serve`.
mod common;
use common::policy::{Category, Param, Policy, Rlimits, Sandbox, Verb};
use common::*;
#[path = "common/hostile.rs"]
mod hostile;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response, encode_request};

/// The flooding agent.
const FLOODER: u32 = 61101;
/// Another agent, who must not notice the flood.
const BYSTANDER: u32 = 61102;
/// The human approver.
const APPROVER: u32 = 61103;

/// The bound each victim's answer must arrive within: generous on a loaded 2-core machine, far
/// below the 10 s a slow sender holds a place or the 600 s a `wait` does.
const PROMPT: Duration = Duration::from_secs(2);

/// The tests of this file load the machine on purpose (hundreds of connections, a 200-call
/// flood): one at a time, so that none of them measures another's load.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The verbs and roles every test here uses; a test sets the daemon's limits it is about.
fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .approver_socket("@DIR@/approver.sock")
        .agents("agents", &[FLOODER, BYSTANDER])
        .agents("me", &[0])
        .humans("sre", &[APPROVER])
        .approvers(&["sre"])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("a trivial verb")
                .roles(&["agents", "me"]),
        )
        .sandbox(
            "few_files",
            Sandbox {
                rlimits: Some(Rlimits { open_files: 32 }),
                ..Sandbox::default()
            },
        )
        .verb(
            "few_files",
            Verb::command(Category::ReadOnly, "/bin/echo few")
                .description("a trivial verb allowed 32 descriptors")
                .roles(&["agents"])
                .sandbox("few_files"),
        )
        .verb(
            "nap",
            Verb::command(Category::ReadOnly, "/bin/sleep {secs}")
                .description("sleeps")
                .roles(&["agents", "me"])
                .timeout("60s")
                .param("secs", Param::matching(r"[0-9]{1,2}(\.[0-9]{1,3})?")),
        )
        .verb(
            "change",
            Verb::command(Category::Mutating, "/bin/echo changed {tag}")
                .description("mutating")
                .roles(&["agents"])
                .param("tag", Param::int(1, 99)),
        )
        .verb(
            "note",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/root"])
                .description("write notes")
                .without_approval()
                .roles(&["agents"]),
        )
}

fn start(policy: Policy) -> Daemon {
    let d = Daemon::start_with(&policy.render(), |dir| {
        std::fs::create_dir_all(dir.join("root/notes")).unwrap();
    });
    d.open_socket();
    let approver = d.path("approver.sock");
    std::fs::set_permissions(&approver, std::fs::Permissions::from_mode(0o666)).unwrap();
    d
}

fn line(request: &Request) -> Vec<u8> {
    encode_request(request)
}

/// The Claude Code hook run as `uid` on a Write fixture beneath the allowed root.
fn hook_as(uid: u32, socket: &Path, root: &Path) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude/write_allowed.json"),
    )
    .unwrap()
    .replace("@ROOT@", root.to_str().unwrap());
    let mut child = Command::new(BIN)
        .args(["hook", "claude-code", "--socket"])
        .arg(socket)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(fixture.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `verbd status --json` as the approver (who sees the counters).
fn approver_status(d: &Daemon) -> serde_json::Value {
    let out = d.cli_as(APPROVER, &["status", "--json"]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A busy answer and its message, or a panic.
fn busy_message(raw: &[u8]) -> String {
    match Response::decode(raw) {
        Ok(Response::Busy { message }) => message,
        other => panic!("expected busy, got {other:?}"),
    }
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    println!("{what}: {took:?}");
    assert!(
        took < PROMPT,
        "{what} took {took:?} while one agent flooded"
    );
    out
}

#[test]
fn one_agent_flooding_waits_and_slow_sends_starves_nobody() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    // The defaults only: they are what must hold.
    let d = start(policy());
    let approver_socket = d.path("approver.sock");
    let root = std::fs::canonicalize(d.dir.path()).unwrap().join("root");
    // The flooder proposes twice: one proposal to wait on, one for the approver to approve.
    let proposed = hostile::requests_as(
        FLOODER,
        &d.socket,
        &[
            hostile::call("change", &[("tag", "1")]),
            hostile::call("change", &[("tag", "2")]),
        ],
    );
    let ids: Vec<u64> = proposed
        .iter()
        .map(|raw| match hostile::decode(raw) {
            Response::ConfirmRequired { id, .. } => id,
            other => panic!("{other:?}"),
        })
        .collect();
    // 300 `wait`s of ten minutes on the agent socket, then slow senders on both sockets.
    let wait = line(&Request::Wait {
        id: ids[0],
        timeout_ms: 600_000,
    });
    // Past the first 64 refusals a second, `busy` comes after a pause of `pacing::HOLD` (1 s):
    // every refusal is in by then.
    let settle = Duration::from_millis(2500);
    let waits = hostile::hold_connections_as(FLOODER, &d.socket, 300, &wait, false, settle);
    let slow_agent =
        hostile::hold_connections_as(FLOODER, &d.socket, 100, b"{\"v\":1,", true, settle);
    let slow_approver =
        hostile::hold_connections_as(FLOODER, &approver_socket, 100, b"{\"v\":1,", true, settle);
    println!(
        "flooder holds {} waits, {} + {} slow senders unanswered",
        waits.unanswered(),
        slow_agent.unanswered(),
        slow_approver.unanswered()
    );

    // (a) The approver, on the approver socket: the real `pending`, then the real approval.
    let pending = timed("approver: pending", || {
        hostile::requests_as(APPROVER, &approver_socket, &[Request::Pending {}])
    });
    let hash = match hostile::decode(&pending[0]) {
        Response::Proposals { proposals } => {
            let listed: Vec<u64> = proposals.iter().map(|p| p.proposal.id).collect();
            assert!(
                listed.contains(&ids[0]) && listed.contains(&ids[1]),
                "{listed:?}"
            );
            proposals
                .iter()
                .find(|p| p.proposal.id == ids[1])
                .unwrap()
                .proposal
                .args_hash
                .clone()
        }
        other => panic!("pending: {other:?}"),
    };
    let approved = timed("approver: approve", || {
        hostile::requests_as(
            APPROVER,
            &approver_socket,
            &[Request::Approve {
                id: ids[1],
                hash: hash[..12].to_string(),
            }],
        )
    });
    assert_eq!(stdout_of(&hostile::decode(&approved[0])), "changed 2\n");

    // (b) Another agent calls a trivial verb.
    let called = timed("second agent: call", || {
        hostile::requests_as(BYSTANDER, &d.socket, &[hostile::call("hello", &[])])
    });
    assert_eq!(stdout_of(&hostile::decode(&called[0])), "hello\n");

    // (c) The Claude Code hook of another agent checks a write beneath its root: allowed.
    let hook = timed("second agent: hook check", || {
        hook_as(BYSTANDER, &d.socket, &root)
    });
    assert_eq!(hook.status.code(), Some(0), "{hook:?}");
    assert!(hook.stdout.is_empty(), "the hook objected: {hook:?}");

    // The flooder spent only its own budget, and was told which limit it hit.
    for raw in waits.answers() {
        let message = busy_message(raw);
        assert!(
            message.contains("daemon.max_waits_per_uid")
                || message.contains("daemon.max_connections_per_uid"),
            "{message}"
        );
        assert!(message.contains(&FLOODER.to_string()), "{message}");
    }
    assert!(
        waits.unanswered() <= 16 + 32,
        "{} of the flooder's waits are held",
        waits.unanswered()
    );
    for held in [&slow_agent, &slow_approver] {
        assert!(held.unanswered() <= 32, "{}", held.unanswered());
        for raw in held.answers() {
            assert!(busy_message(raw).contains("daemon.max_connections_per_uid"));
        }
    }
}

#[test]
fn thirty_two_concurrent_calls_over_sixteen_slots_all_run() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(policy().max_executions(16));
    let calls: Vec<Request> = (0..32)
        .map(|_| hostile::call("nap", &[("secs", "0.3")]))
        .collect();
    let answers = hostile::concurrent_requests_as(FLOODER, &d.socket, &calls);
    let busy = answers
        .iter()
        .filter(|raw| matches!(hostile::decode(raw), Response::Busy { .. }))
        .count();
    println!("32 concurrent calls over 16 slots: {busy} busy");
    assert_eq!(
        busy, 0,
        "calls over max_executions must queue, not get busy"
    );
    for raw in &answers {
        assert_eq!(stdout_of(&hostile::decode(raw)), "");
    }
    // Journaled as before: one exec record (written before the child starts) and one result
    // per run.
    let events = d.journal_events();
    let count = |kind: &str| {
        events
            .iter()
            .filter(|e| e["kind"] == kind && e["verb"] == "nap")
            .count()
    };
    assert_eq!((count("exec"), count("result")), (32, 32));
}

/// `max_connections_per_uid` (32) clients of one uid, each calling again the moment it hears
/// its answer: none may meet its own finished connection still holding its place. (Before the
/// place was freed as soon as the answer was written, the overhead bench's 32 clients got 123
/// `busy` answers in 4 s.)
#[test]
fn thirty_two_clients_reconnecting_at_once_never_get_busy() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(policy().max_connections_per_uid(32).max_executions(64));
    // The start's readiness probe (a connect and close, as uid 0 too) holds its place until the
    // daemon has looked its caller up and read the end of its stream; under load that can
    // still be pending here, and a 33rd connection of uid 0 is rightly `busy`. Start the 32
    // clients once only the approver's own status request is in flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = approver_status(&d);
        let in_flight = status["metrics"]["connections_in_flight"].as_u64();
        if in_flight == Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections in flight stayed at {in_flight:?}: {status}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let request = hostile::call("hello", &[]);
    let busy = std::sync::atomic::AtomicUsize::new(0);
    let ran = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..32 {
            scope.spawn(|| {
                for _ in 0..50 {
                    match verbd::client::request(&d.socket, &request, Duration::from_secs(60)) {
                        Ok(Response::Ok { result, .. }) => {
                            assert_eq!(result.stdout, "hello\n");
                            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Ok(Response::Busy { message }) => {
                            eprintln!("busy: {message}");
                            busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        other => panic!("unexpected answer: {other:?}"),
                    }
                }
            });
        }
    });
    let (busy, ran) = (busy.into_inner(), ran.into_inner());
    println!("32 clients x 50 calls: {ran} ran, {busy} busy");
    assert_eq!((ran, busy), (1600, 0));
}

#[test]
fn one_uid_flooding_two_hundred_calls_delays_another_by_one_turn() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(
        policy()
            .max_executions(4)
            .max_connections(300)
            .max_connections_per_uid(250)
            .queue_timeout("120s"),
    );
    let socket = d.socket.clone();
    let flood = std::thread::spawn(move || {
        let calls: Vec<Request> = (0..200)
            .map(|_| hostile::call("nap", &[("secs", "0.2")]))
            .collect();
        hostile::concurrent_requests_as(FLOODER, &socket, &calls)
    });
    // The flood is queued once its runs follow one another.
    let deadline = Instant::now() + Duration::from_secs(30);
    while d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec" && e["verb"] == "nap")
        .count()
        < 8
    {
        assert!(Instant::now() < deadline, "the flood never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let answer = hostile::requests_as(BYSTANDER, &d.socket, &[hostile::call("hello", &[])]);
    let took = started.elapsed();
    println!("one call behind a 200-call flood over 4 slots: {took:?}");
    assert_eq!(stdout_of(&hostile::decode(&answer[0])), "hello\n");
    // One turn is one 0.2 s run; the flood's queue is ~10 s long.
    assert!(
        took < PROMPT,
        "the single call waited {took:?} behind the flood"
    );
    let flooded = flood.join().unwrap();
    let ran = flooded
        .iter()
        .filter(|raw| matches!(hostile::decode(raw), Response::Ok { .. }))
        .count();
    assert_eq!(ran, 200, "every queued call of the flood runs in the end");
}

#[test]
fn a_call_still_queued_at_the_deadline_gets_busy_naming_the_limit() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(policy().max_executions(1).queue_timeout("500ms"));
    let socket = d.socket.clone();
    let hog = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &hostile::call("nap", &[("secs", "4.321")]),
            Duration::from_secs(30),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_matching("sleep 4.321").is_empty() {
        assert!(Instant::now() < deadline, "the hog never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    let answer = hostile::requests_as(BYSTANDER, &d.socket, &[hostile::call("hello", &[])]);
    let waited = started.elapsed();
    let message = busy_message(answer[0].as_ref().expect("an answer"));
    println!("after {waited:?}: busy: {message}");
    assert!(
        waited >= Duration::from_millis(500),
        "busy came before the queue deadline: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(4000),
        "busy came after the hog ended"
    );
    assert!(
        message.contains("daemon.max_executions") && message.contains("daemon.queue_timeout"),
        "{message}"
    );
    // Nothing ran: no exec record for the refused call.
    assert!(
        !d.journal_events()
            .iter()
            .any(|e| e["kind"] == "exec" && e["verb"] == "hello")
    );
    assert!(matches!(hog.join().unwrap(), Ok(Response::Ok { .. })));
}

/// An agent whose connection budget is full keeps 64 sockets that reconnect the moment the
/// daemon answers. Each refusal costs the daemon an accept, a credentials lookup, a send and a
/// close — CPU taken from every other caller — so the answers must come paced: a burst over
/// the budget hears `busy` at once, but past `ANSWERED_AT_ONCE` refusals a second each socket
/// is answered at most once per `HOLD`. (Before pacing, these 64 sockets got one `busy` after
/// another as fast as the daemon could refuse.)
#[test]
fn a_uid_reconnecting_in_a_loop_is_answered_at_a_paced_rate() {
    use verbd::server::pacing::{ANSWERED_AT_ONCE, HOLD};
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(policy());
    let opening = b"{\"v\":1,";
    let places = hostile::hold_connections_as(
        FLOODER,
        &d.socket,
        32,
        opening,
        true,
        Duration::from_millis(300),
    );
    assert_eq!(places.unanswered(), 32, "the flooder holds its 32 places");
    // A burst over the budget is told at once (within the 500 ms it waits, half of HOLD).
    let burst = hostile::hold_connections_as(FLOODER, &d.socket, 8, opening, false, HOLD / 2);
    assert_eq!(burst.unanswered(), 0, "a burst of 8 over the budget waited");
    for raw in burst.answers() {
        let message = busy_message(raw);
        assert!(
            message.contains("daemon.max_connections_per_uid"),
            "{message}"
        );
    }
    drop(burst);
    // The loop, with the approver watching the held connections and a bystander calling.
    let (sockets, seconds) = (64u64, 3u64);
    let socket = d.socket.clone();
    let flood = std::thread::spawn(move || {
        hostile::reconnect_loop_as(
            FLOODER,
            &socket,
            sockets as usize,
            opening,
            Duration::from_secs(seconds),
        )
    });
    std::thread::sleep(Duration::from_millis(1500));
    let paced = approver_status(&d)["metrics"]["busy_paced"]
        .as_u64()
        .expect("busy_paced");
    let called = timed("second agent: call during the loop", || {
        hostile::requests_as(BYSTANDER, &d.socket, &[hostile::call("hello", &[])])
    });
    assert_eq!(stdout_of(&hostile::decode(&called[0])), "hello\n");
    let (busy, other, silent) = flood.join().unwrap();
    println!(
        "{sockets} sockets reconnecting for {seconds} s: {busy} busy, {other} other, {silent} \
         closed without an answer; {paced} held at 1.5 s"
    );
    assert_eq!((other, silent), (0, 0), "every refusal is answered `busy`");
    // At most ANSWERED_AT_ONCE per window (the loop spans at most seconds + 1 of them, the
    // burst's 8 included) and one answer per socket per HOLD.
    let bound = (seconds + 1) * u64::from(ANSWERED_AT_ONCE) + sockets * (seconds / HOLD.as_secs());
    assert!(
        busy <= bound,
        "{busy} busy answers in {seconds} s to {sockets} sockets: not paced (at most {bound})"
    );
    assert!(
        busy >= sockets,
        "the held connections were answered: {busy}"
    );
    assert!(
        paced > 0 && paced <= sockets,
        "status showed {paced} connections held for a paced busy"
    );
}

/// A child of the daemon holds the daemon's descriptor table until exec: while the daemon holds
/// 64 connections, the lowest free descriptor number in the child is above a verb's
/// `open_files = 32`. The sandbox's last new descriptor (the seccomp listener) must still be
/// made — the descriptor limit is set after it. (When it was set first, the call failed: "the
/// sandbox could not be applied in the child (stage: seccomp)", and a flooder's connections
/// could break every verb with a low limit.)
#[test]
fn a_verb_with_a_low_descriptor_limit_starts_while_the_daemon_holds_many_connections() {
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let d = start(policy().max_connections_per_uid(100));
    let held = hostile::hold_connections_as(
        FLOODER,
        &d.socket,
        64,
        b"{\"v\":1,",
        true,
        Duration::from_millis(300),
    );
    assert_eq!(held.unanswered(), 64, "the flooder holds 64 connections");
    let called = hostile::requests_as(BYSTANDER, &d.socket, &[hostile::call("few_files", &[])]);
    assert_eq!(stdout_of(&hostile::decode(&called[0])), "few\n");
}

/// The daemon raises its soft descriptor limit to the hard one (systemd starts services at 1024
/// of 524288), and its budget of connections held for a paced `busy` is an eighth of that: a
/// daemon left at 1024 could hold only 128, and would meet `EMFILE` at accept long before its
/// connection limits.
#[test]
fn the_daemon_raises_its_descriptor_limit_and_sizes_the_paced_budget_from_it() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use verbd::server::pacing::held_budget;
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard > 1024,
        "this test needs a hard descriptor limit above 1024, not {hard}"
    );
    // Started as systemd starts it: soft 1024 (the tests of this file run one at a time).
    setrlimit(Resource::RLIMIT_NOFILE, 1024, hard).unwrap();
    let d = start(policy());
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let pid = d.child.as_ref().unwrap().id();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect();
    assert_eq!(
        open_files,
        [hard.to_string(), hard.to_string()],
        "the daemon's descriptor limits: {limits}"
    );
    let budget = approver_status(&d)["metrics"]["max_busy_paced"].as_u64();
    assert_eq!(budget, Some(held_budget(hard) as u64));
}

/// Two hostile agents of the uids of this file's range for the paced budget.
const BUDGET_FLOODER: u32 = 63001;
/// The second agent: it loops too, and must still be paced while the first one floods.
const BUDGET_SECOND: u32 = 63002;

/// One uid keeps more refused sockets than the daemon's whole budget of held connections (an
/// eighth of its descriptor limit: 64 for the 512 it is started with here). The budget must not
/// be the flooder's alone: a second uid looping on refusals must still be paced, or one agent
/// switches pacing off for every other (before the per-uid share, the budget was global: the
/// second agent's 16 sockets were answered at once, thousands of `busy` in 3 s).
#[test]
fn one_uid_cannot_take_the_whole_paced_budget() {
    use verbd::server::pacing::{ANSWERED_AT_ONCE, HOLD, held_budget};
    if !require_root("fair limits") {
        return;
    }
    let _alone = one_at_a_time();
    // The daemon raises its soft limit to the hard one: it starts with both at 512.
    let d = Daemon::start_with_open_files(&policy().render(), 512, |dir| {
        std::fs::create_dir_all(dir.join("root/notes")).unwrap();
    });
    d.open_socket();
    std::fs::set_permissions(
        d.path("approver.sock"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let budget = approver_status(&d)["metrics"]["max_busy_paced"]
        .as_u64()
        .unwrap();
    assert_eq!(budget, held_budget(512) as u64);
    let opening = b"{\"v\":1,";
    let settle = Duration::from_millis(300);
    // Both agents fill their connection places (slow senders): every further connection is
    // refused at accept.
    let first_places =
        hostile::hold_connections_as(BUDGET_FLOODER, &d.socket, 32, opening, true, settle);
    let second_places =
        hostile::hold_connections_as(BUDGET_SECOND, &d.socket, 32, opening, true, settle);
    assert_eq!(
        (first_places.unanswered(), second_places.unanswered()),
        (32, 32),
        "each agent holds its 32 places"
    );
    // The flooder: twice the whole budget in sockets, reconnecting the moment each is answered.
    let flood_sockets = 2 * budget as usize;
    let socket = d.socket.clone();
    let flood = std::thread::spawn(move || {
        hostile::reconnect_loop_as(
            BUDGET_FLOODER,
            &socket,
            flood_sockets,
            opening,
            Duration::from_secs(5),
        )
    });
    // Once the flooder's sockets are held, the second agent loops too, on 16 sockets.
    std::thread::sleep(Duration::from_millis(1500));
    let held_by_flood = approver_status(&d)["metrics"]["busy_paced"]
        .as_u64()
        .unwrap();
    let (sockets, seconds) = (16u64, 3u64);
    let (busy, other, silent) = hostile::reconnect_loop_as(
        BUDGET_SECOND,
        &d.socket,
        sockets as usize,
        opening,
        Duration::from_secs(seconds),
    );
    let (flood_busy, _, _) = flood.join().unwrap();
    println!(
        "budget {budget}: flooder's {flood_sockets} sockets held {held_by_flood} at 1.5 s and \
         got {flood_busy} busy in 5 s; second agent's {sockets} sockets got {busy} busy, \
         {other} other, {silent} silent in {seconds} s"
    );
    assert_eq!((other, silent), (0, 0), "every refusal is answered `busy`");
    assert!(
        held_by_flood < budget,
        "the flooder alone held {held_by_flood} of the {budget} places"
    );
    let bound = (seconds + 1) * u64::from(ANSWERED_AT_ONCE) + sockets * (seconds / HOLD.as_secs());
    assert!(
        busy <= bound,
        "the second agent's {sockets} sockets got {busy} busy answers in {seconds} s while the \
         flooder held the budget: not paced (at most {bound})"
    );
    drop((first_places, second_places));
}
