//! Per-call PostgreSQL roles (`[postgres_ephemeral.NAME]`) through the real daemon against a real
//! PostgreSQL with password authentication: each call runs as a role of its own that exists only
//! while the call runs; its password, read out of the running child by root, stops working when
//! the call ends; a daemon killed with SIGKILL mid-call leaves a role that the next start drops;
//! 100 concurrent calls leave no role behind; a mint that fails fails the call, never falls back;
//! an approved mutating verb runs as a role that holds the one privilege that verb needs.
use crate::common;
use crate::pg;
use crate::psql_verbs::open_socket_dir;
use common::harness::write_secret;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response};

const REAL_PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
const ADMIN_PASSWORD: &str = "admin-Password-for-the-tests-0123";
/// The human who approves the mutating verbs (the requester is root).
const APPROVER: u32 = 63_321;

fn policy(pg: &pg::PgCluster, secrets: &std::path::Path) -> String {
    let dir = pg.socket_dir().display().to_string();
    let secrets = secrets.display();
    let psql = |sql: &str| {
        format!(
            r#"["{REAL_PSQL}", "-X", "--no-password", "-v", "ON_ERROR_STOP=1", "--csv", "-h", "{dir}", "-p", "5432", "-d", "verbd", "-c", "{sql}"]"#
        )
    };
    let source = |name: &str, secret: &str, template: &str| {
        format!(
            r#"
[postgres_ephemeral.{name}]
psql = "{REAL_PSQL}"
host = "{dir}"
database = "verbd"
admin_user = "verbd_admin"
admin_secret = "{secret}"
template = "{template}"
slack = "5s"
"#
        )
    };
    format!(
        r#"
version = 1
[daemon]
allow_root = true
max_executions = 6
queue_timeout = "10m"
max_connections_per_uid = 128

[roles.me]
kind = "human"
uids = [0]

[roles.ops]
kind = "human"
uids = [{APPROVER}]

[approvals]
approvers = ["ops"]
expires = "30m"
notify = "/bin/false {{id}}"

[secrets.pg_admin]
file = "{secrets}/pg_admin"
[secrets.pg_wrong]
file = "{secrets}/pg_wrong"
{reports}
{broken}
{tickets}
[sandbox.pg]
read = ["/usr", "/lib", "/etc", "{dir}"]
unix_sockets = ["{dir}/.s.PGSQL.5432"]

[verb.report]
description = "rows of t, as the call's own role, after sleeping"
category = "read-only"
roles = ["me"]
sandbox = "pg"
timeout = "60s"
postgres_ephemeral = "reports"
command = {report}
params.seconds = {{ type = "int", min = 0, max = 30 }}

[verb.show-env]
description = "the child's environment"
category = "read-only"
roles = ["me"]
sandbox = "pg"
postgres_ephemeral = "reports"
command = ["/usr/bin/printenv"]

[verb.broken-report]
description = "a source whose admin password is wrong"
category = "read-only"
roles = ["me"]
sandbox = "pg"
postgres_ephemeral = "broken"
command = {count}

[verb.add-ticket]
description = "insert a ticket, after approval, as a role that may only insert tickets"
category = "mutating"
roles = ["me"]
sandbox = "pg"
postgres_ephemeral = "tickets"
command = {add_ticket}

[verb.overreach]
description = "the same source used for a write its template was not granted"
category = "mutating"
roles = ["me"]
sandbox = "pg"
postgres_ephemeral = "tickets"
command = {overreach}
"#,
        reports = source("reports", "pg_admin", "reporting_ro"),
        broken = source("broken", "pg_wrong", "reporting_ro"),
        tickets = source("tickets", "pg_admin", "ticket_writer"),
        add_ticket = psql("INSERT INTO tickets VALUES ('approved ticket')"),
        overreach = psql("INSERT INTO t VALUES (99, 'planted')"),
        report = psql(
            "SELECT current_user LIKE 'verbd_eph_%' AS own_role, pg_sleep({seconds})::text AS slept, count(*) AS n FROM t"
        ),
        count = psql("SELECT count(*) AS n FROM t"),
    )
}

struct Setup {
    // Dropped in this order: the daemon first (it may drop roles while stopping), then PG.
    daemon: Daemon,
    pg: pg::PgCluster,
    _secrets: tempfile::TempDir,
}

fn start() -> Option<Setup> {
    if !require_root("per-call database roles") {
        return None;
    }
    let pg = pg::PgCluster::start()?;
    open_socket_dir(&pg);
    pg.setup(&format!(
        "CREATE ROLE verbd_admin LOGIN CREATEROLE PASSWORD '{ADMIN_PASSWORD}';\n\
         GRANT pg_signal_backend TO verbd_admin;\n\
         CREATE ROLE reporting_ro NOLOGIN;\n\
         GRANT SELECT ON t TO reporting_ro;\n\
         CREATE TABLE tickets (note text NOT NULL);\n\
         CREATE ROLE ticket_writer NOLOGIN;\n\
         GRANT INSERT ON tickets TO ticket_writer;"
    ));
    pg.require_passwords();
    let secrets = tempfile::Builder::new()
        .prefix("verbd-pgsecrets-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(secrets.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    for (name, value) in [
        ("pg_admin", ADMIN_PASSWORD),
        ("pg_wrong", "not-the-password-at-all"),
    ] {
        write_secret(&secrets.path().join(name), value);
    }
    let daemon = Daemon::start(&policy(&pg, secrets.path()));
    daemon.open_socket();
    Some(Setup {
        daemon,
        pg,
        _secrets: secrets,
    })
}

/// Roles named like minted ones that exist now.
fn minted_roles(pg: &pg::PgCluster) -> Vec<String> {
    let out = pg.psql(&[
        "-At",
        "-c",
        "SELECT rolname FROM pg_roles WHERE rolname LIKE 'verbd\\_eph\\_%' ORDER BY 1",
    ]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Logs in as `role` with `password` (over the socket, SCRAM): psql's exit and stderr.
fn login(pg: &pg::PgCluster, role: &str, password: &str) -> (bool, String) {
    let out = Command::new(REAL_PSQL)
        .args(["-X", "--no-password", "-At", "-h"])
        .arg(pg.socket_dir())
        .args([
            "-p",
            "5432",
            "-d",
            "verbd",
            "-U",
            role,
            "-c",
            "SELECT count(*) FROM t",
        ])
        .env_clear()
        .env("PGPASSWORD", password)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `PGUSER`/`PGPASSWORD` of a running verb child, read from /proc as root (what a leak of
/// the child's environment would hand an attacker).
fn credential_of_running_child(pg: &pg::PgCluster) -> Option<(String, String)> {
    let socket_dir = pg.socket_dir().as_os_str().as_encoded_bytes().to_vec();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        // Only a child of this test's cluster (tests run side by side).
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == socket_dir.as_slice())
        {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        let get = |key: &str| {
            vars.iter()
                .find_map(|v| v.strip_prefix(format!("{key}=").as_bytes()))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        if let (Some(user), Some(password)) = (get("PGUSER"), get("PGPASSWORD"))
            && user.starts_with("verbd_eph_")
        {
            return Some((user, password));
        }
    }
    None
}

fn call_async(
    socket: std::path::PathBuf,
    verb: &str,
    seconds: &str,
) -> std::thread::JoinHandle<Option<Response>> {
    let verb = verb.to_string();
    let seconds = seconds.to_string();
    std::thread::spawn(move || {
        let args = [("seconds".to_string(), serde_json::Value::String(seconds))]
            .into_iter()
            .collect();
        verbd::client::request(
            &socket,
            &Request::Call {
                verb,
                args,
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(120),
        )
        .ok()
    })
}

#[test]
fn a_call_runs_as_its_own_role_whose_password_dies_with_the_call() {
    let Some(s) = start() else { return };
    let call = call_async(s.daemon.socket.clone(), "report", "3");
    let mut leaked = None;
    wait_for("the verb's child to run", || {
        leaked = credential_of_running_child(&s.pg);
        leaked.is_some()
    });
    let (role, password) = leaked.unwrap();
    assert!(
        minted_roles(&s.pg).contains(&role),
        "{role} exists while the call runs"
    );
    let attrs = s.pg.psql(&[
        "-At",
        "-c",
        &format!(
            "SELECT rolconnlimit, rolvaliduntil IS NOT NULL, rolcanlogin, \
             pg_has_role(rolname, 'reporting_ro', 'member') FROM pg_roles WHERE rolname = '{role}'"
        ),
    ]);
    assert_eq!(String::from_utf8_lossy(&attrs.stdout).trim(), "1|t|t|t");
    // CONNECTION LIMIT 1: the verb holds the only session the role may have.
    let (ok, stderr) = login(&s.pg, &role, &password);
    assert!(!ok, "a second session of the call's role was let in");
    assert!(stderr.contains("too many connections for role"), "{stderr}");

    let response = call.join().unwrap().expect("an answer");
    let stdout = stdout_of(&response);
    assert_eq!(stdout, "own_role,slept,n\nt,,3\n", "{response:?}");
    // After the call: the role is gone and its password opens nothing.
    assert!(!minted_roles(&s.pg).contains(&role));
    let (ok, stderr) = login(&s.pg, &role, &password);
    assert!(!ok, "the call's password still works after the call");
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );

    // Journaled by name, minted before it was created and dropped after; never the password.
    let events = s.daemon.journal_events();
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e["role"] == role.as_str())
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["credential_minted", "credential_dropped"]);
    let journal = s.daemon.journal();
    assert!(
        !journal.contains(&password),
        "the password is in the journal"
    );
    assert!(
        !s.daemon.log().contains(&password),
        "the password is in the log"
    );
    assert!(
        !s.pg.log().contains(&password),
        "the password reached the server log"
    );
}

#[test]
fn the_password_is_cut_out_of_the_output_and_status_counts_roles() {
    let Some(s) = start() else { return };
    let stdout = stdout_of(&s.daemon.call("show-env", &[]));
    assert!(stdout.contains("PGPASSWORD=[REDACTED:"), "{stdout}");
    assert!(stdout.contains("PGUSER=verbd_eph_"), "{stdout}");
    assert!(minted_roles(&s.pg).is_empty());

    // A source whose admin password is wrong: the call fails closed, nothing ran.
    match s.daemon.call("broken-report", &[]) {
        Response::Error { message } => {
            assert!(
                message.contains("no per-call database role could be minted"),
                "{message}"
            );
            assert!(message.contains("nothing ran"), "{message}");
            assert!(!message.contains("not-the-password"), "{message}");
        }
        other => panic!("a failed mint must fail the call: {other:?}"),
    }
    let failed: Vec<_> = s
        .daemon
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "credential_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["action"], "mint");
    assert_eq!(failed[0]["owed"], false, "a refused login created nothing");
    assert!(minted_roles(&s.pg).is_empty());

    let out = s.daemon.cli(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let credentials = &status["metrics"]["credentials"];
    assert_eq!(credentials["minted"], 1, "{credentials}");
    assert_eq!(credentials["dropped"], 1, "{credentials}");
    assert_eq!(credentials["mint_failed"], 1, "{credentials}");
    assert_eq!(credentials["owed"], 0, "{credentials}");
}

#[test]
fn a_role_left_by_a_killed_daemon_is_dropped_by_the_next_start() {
    let Some(mut s) = start() else { return };
    let call = call_async(s.daemon.socket.clone(), "report", "20");
    wait_for("a minted role", || !minted_roles(&s.pg).is_empty());
    let role = minted_roles(&s.pg).remove(0);
    wait_for("the verb's child", || {
        credential_of_running_child(&s.pg).is_some()
    });
    s.daemon.kill9();
    let _ = call.join();
    assert_eq!(
        minted_roles(&s.pg),
        std::slice::from_ref(&role),
        "a SIGKILLed daemon leaves its role behind"
    );
    s.daemon.respawn();
    wait_for("the next start to drop the role", || {
        minted_roles(&s.pg).is_empty()
    });
    // The record follows the DROP (a role is never journaled gone while it may exist).
    wait_for("the drop at start to be journaled", || {
        s.daemon.journal_events().into_iter().any(|e| {
            e["kind"] == "credential_dropped" && e["role"] == role.as_str() && e["at_start"] == true
        })
    });
    let out = s.daemon.cli(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["metrics"]["credentials"]["owed"], 0);
}

#[test]
fn a_hundred_concurrent_calls_leave_no_role_behind() {
    let Some(s) = start() else { return };
    let calls: Vec<_> = (0..100)
        .map(|_| call_async(s.daemon.socket.clone(), "report", "0"))
        .collect();
    let mut ok = 0;
    for call in calls {
        match call.join().unwrap() {
            Some(Response::Ok { result, .. }) if result.exit.code == Some(0) => ok += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ok, 100);
    assert_eq!(minted_roles(&s.pg), Vec::<String>::new());
    let events = s.daemon.journal_events();
    let count = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(count("credential_minted"), 100);
    assert_eq!(count("credential_dropped"), 100);
    assert_eq!(count("credential_failed"), 0);
}

/// Proposes `verb` as root (CONFIRM_REQUIRED), approves it as [`APPROVER`], and returns what
/// `verbd approve` said and the proposal as `verbd result --json` shows it after the run.
fn propose_and_approve(s: &Setup, verb: &str) -> (std::process::Output, serde_json::Value) {
    let out = s.daemon.cli(&["call", "--json", verb]);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let proposal: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = proposal["id"].as_u64().unwrap();
    let hash = proposal["hash"].as_str().unwrap();
    assert!(
        minted_roles(&s.pg).is_empty(),
        "a role was minted before the approval"
    );
    let out = s.daemon.cli_as(
        APPROVER,
        &["approve", &id.to_string(), "--hash", &hash[..12]],
    );
    let view = s.daemon.cli(&["result", &id.to_string(), "--json"]);
    let view = serde_json::from_slice(&view.stdout).unwrap_or_else(|e| panic!("{e}: {view:?}"));
    (out, view)
}

#[test]
fn an_approved_mutating_verb_runs_as_a_role_holding_only_its_one_privilege() {
    let Some(s) = start() else { return };
    let tickets = || {
        let out = s.pg.psql(&["-At", "-c", "SELECT note FROM tickets"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };

    // The approved write runs as a role minted for it, from the `ticket_writer` template.
    let (approved, result) = propose_and_approve(&s, "add-ticket");
    assert!(approved.status.success(), "{approved:?}");
    assert_eq!(result["state"], "succeeded", "{result}");
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(tickets(), "approved ticket");
    let minted: Vec<_> = s
        .daemon
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "credential_minted")
        .collect();
    assert_eq!(minted.len(), 1, "{minted:?}");
    assert_eq!(minted[0]["source"], "tickets", "{minted:?}");
    assert_eq!(minted[0]["exec_seq"], result["exec_seq"], "{minted:?}");

    // The same source for a write its template was not granted: the server refuses it.
    let (approved, result) = propose_and_approve(&s, "overreach");
    assert!(!approved.status.success(), "{approved:?}");
    assert_ne!(result["exit_code"], 0, "{result}");
    let stderr = result["result"]["stderr"].as_str().unwrap_or_default();
    assert!(
        stderr.contains("permission denied for table t"),
        "the server did not refuse the overreaching insert: {result}"
    );
    let planted =
        s.pg.psql(&["-At", "-c", "SELECT count(*) FROM t WHERE id = 99"]);
    assert_eq!(String::from_utf8_lossy(&planted.stdout).trim(), "0");

    // Neither role outlives its call.
    assert_eq!(minted_roles(&s.pg), Vec::<String>::new());
    let dropped = s
        .daemon
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "credential_dropped")
        .count();
    assert_eq!(dropped, 2);
}
