//! The caller-identity cache against the real user database: a uid removed from the group that
//! gives it a role loses the role at its very next call, though its identity was cached; added
//! back, it gets the role back. Users and groups are created and removed by the test (root).
mod common;
#[path = "common/hostile.rs"]
mod hostile;
use common::policy::{Category, Policy, Verb};
use common::*;
use hostile::{call, decode, requests_as};
use std::process::Command;
use std::time::Duration;
use verbd::protocol::Response;

const UID: u32 = 61901;
const USER: &str = "vperf61901";
const OPS_GROUP: &str = "vperfops61901";

/// `hello`, for the members of the ops group.
fn policy() -> String {
    Policy::new()
        .allow_root()
        .agent_groups("ops", &[OPS_GROUP])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("for the ops group")
                .roles(&["ops"]),
        )
        .render()
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// Removes the test's user and groups however the test ends.
struct Accounts;

impl Accounts {
    fn create() -> Accounts {
        Accounts::remove();
        run("/usr/sbin/groupadd", &["-g", &UID.to_string(), USER]);
        run("/usr/sbin/groupadd", &[OPS_GROUP]);
        run(
            "/usr/sbin/useradd",
            &[
                "-u",
                &UID.to_string(),
                "-g",
                USER,
                "-M",
                "-s",
                "/usr/sbin/nologin",
                USER,
            ],
        );
        Accounts
    }

    fn remove() {
        for (program, name) in [
            ("/usr/sbin/userdel", USER),
            ("/usr/sbin/groupdel", OPS_GROUP),
            ("/usr/sbin/groupdel", USER),
        ] {
            let _ = Command::new(program)
                .arg(name)
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        Accounts::remove();
    }
}

fn hello(daemon: &Daemon) -> Response {
    let answers = requests_as(UID, &daemon.socket, &[call("hello", &[])]);
    decode(&answers[0])
}

/// Waits past the cache's racy window, so the next answer is cached.
fn settle() {
    std::thread::sleep(verbd::server::identity::RACY_WINDOW + Duration::from_millis(500));
}

#[test]
fn a_group_membership_change_reaches_a_cached_caller_at_its_next_call() {
    if !require_root("a_group_membership_change_reaches_a_cached_caller_at_its_next_call") {
        return;
    }
    let _accounts = Accounts::create();
    run("/usr/sbin/usermod", &["-a", "-G", OPS_GROUP, USER]);
    let daemon = Daemon::start(&policy());
    daemon.open_socket();
    settle();

    // Positive control: in the group, the verb runs (twice: the second answer is the cache's).
    for _ in 0..2 {
        match hello(&daemon) {
            Response::Ok { result, .. } => assert_eq!(result.stdout.trim(), "hello"),
            other => panic!("member of {OPS_GROUP} refused: {other:?}"),
        }
    }

    // The attack on a stale cache: removed from the group, the uid tries again at once.
    run("/usr/bin/gpasswd", &["-d", USER, OPS_GROUP]);
    match hello(&daemon) {
        Response::Denied { reason } => {
            assert!(reason.contains("no role"), "{reason}");
            eprintln!("removed from {OPS_GROUP}: denied: {reason}");
        }
        other => panic!("removed from {OPS_GROUP}, still served: {other:?}"),
    }
    settle();
    assert!(matches!(hello(&daemon), Response::Denied { .. }));

    // Added back: served again at the next call.
    run("/usr/bin/gpasswd", &["-a", USER, OPS_GROUP]);
    match hello(&daemon) {
        Response::Ok { result, .. } => assert_eq!(result.stdout.trim(), "hello"),
        other => panic!("added back to {OPS_GROUP}, refused: {other:?}"),
    }
}
