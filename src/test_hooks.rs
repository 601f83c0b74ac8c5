//! Failure injection for the daemon-level tests, compiled only with the `test-hooks` feature (the
//! integration tests' build: the release binary has none of this). Each hook is switched on by an
//! environment variable of the daemon, so a test can put a fault *between* two steps of a real
//! `verbd serve` and watch what the other side sees meanwhile.
//!
//! - `VERBD_TEST_FAIL_STAGE=PROFILE:STAGE`: every child of sandbox profile PROFILE (and of its
//!   dry-run twin) fails at STAGE (a [`Stage::name`]) before exec. It can only end a child, never
//!   weaken one (see `PreparedSandbox::fail_stage_for_test`).
//! - `VERBD_TEST_JOURNAL_FAULT=KIND:fail`: every journal record of event kind KIND is written and
//!   then its `fdatasync` fails (the writer rolls back every record that fdatasync was to
//!   cover), as a failing disk would.
//! - `VERBD_TEST_JOURNAL_FAULT=KIND:block:DIR`: just before the `fdatasync` that is to make a
//!   record of kind KIND durable (its line written), create `DIR/blocked.KIND` and wait until
//!   `DIR/release.KIND` exists (at most [`BLOCK_LIMIT`], then fail that fdatasync: a hook never
//!   lets a record through unsynced). What the daemon does before the fdatasync (answer a
//!   mapped command) happens meanwhile; what it does after (start a child) waits.
//! - `VERBD_TEST_ACCEPT_PANIC_UID=N`: a socket's accept thread panics when it has accepted a
//!   connection of uid N, as a bug there would: the daemon must stop loudly, not serve deaf.
//! - `VERBD_TEST_SPAWNER_PAUSE=DIR`: armed by creating `DIR/arm`. The spawner's next fork
//!   removes it, writes the child's pid to `DIR/forked` and, before the spawner answers the
//!   daemon, waits until `DIR/release` exists (at most [`BLOCK_LIMIT`]): a test can kill the
//!   spawner between the fork and its answer. The daemon passes the variable to the spawner,
//!   whose environment is otherwise cleared.
//! - `VERBD_TEST_KILL_AS_DAEMON_ONLY` (any value): every kill of a child is sent as the daemon
//!   only, never from a thread that takes the child's `run_as` uid (module `sandbox::kill`), so
//!   the kill of a `run_as` child of another uid fails as on a daemon that could not take it.
//!
//! Invariant: a hook can only delay or fail a step; none skips or reorders one.
#![forbid(unsafe_code)]

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::sandbox::{PreparedSandbox, Stage};

/// Names the sandbox profile and stage to fail.
pub const FAIL_STAGE_ENV: &str = "VERBD_TEST_FAIL_STAGE";
/// Names the journal record kind and the fault.
pub const JOURNAL_FAULT_ENV: &str = "VERBD_TEST_JOURNAL_FAULT";
/// Names the uid whose connection makes the accept thread panic.
pub const ACCEPT_PANIC_ENV: &str = "VERBD_TEST_ACCEPT_PANIC_UID";
/// Names the directory of the spawner's pause between a fork and its answer.
pub const SPAWNER_PAUSE_ENV: &str = "VERBD_TEST_SPAWNER_PAUSE";

/// Names the switch that keeps every kill of a child to the daemon's own identity (read by
/// `sandbox::kill` itself, so the sandbox layer does not reach up to this module).
pub use crate::sandbox::kill::KILL_AS_DAEMON_ONLY_ENV;

/// Called by the accept thread with each accepted connection's uid.
pub fn after_accept(uid: u32) {
    if std::env::var(ACCEPT_PANIC_ENV).is_ok_and(|wanted| wanted == uid.to_string()) {
        panic!("test hook: a connection of uid {uid}");
    }
}

/// The longest a blocked journal write waits for its release file.
pub const BLOCK_LIMIT: Duration = Duration::from_secs(120);

/// `sandbox`, made to fail at the stage `VERBD_TEST_FAIL_STAGE` names for `profile`.
pub fn fail_stage_if_asked(profile: &str, sandbox: PreparedSandbox) -> PreparedSandbox {
    let Ok(setting) = std::env::var(FAIL_STAGE_ENV) else {
        return sandbox;
    };
    let Some((wanted, stage_name)) = setting.split_once(':') else {
        panic!("{FAIL_STAGE_ENV}={setting:?}: expected PROFILE:STAGE");
    };
    if wanted != profile {
        return sandbox;
    }
    let stage = Stage::ALL
        .into_iter()
        .find(|stage| stage.name() == stage_name)
        .unwrap_or_else(|| panic!("{FAIL_STAGE_ENV}: no stage named {stage_name:?}"));
    sandbox.fail_stage_for_test(stage)
}

/// Called by the journal writer for each record of kind `kind` written since the last
/// `fdatasync`, just before the `fdatasync` that is to make them durable.
pub fn before_journal_sync(record_kind: &str) -> io::Result<()> {
    let Ok(setting) = std::env::var(JOURNAL_FAULT_ENV) else {
        return Ok(());
    };
    let mut parts = setting.splitn(3, ':');
    let (Some(kind), Some(fault)) = (parts.next(), parts.next()) else {
        panic!("{JOURNAL_FAULT_ENV}={setting:?}: expected KIND:fail or KIND:block:DIR");
    };
    if record_kind != kind {
        return Ok(());
    }
    match (fault, parts.next()) {
        ("fail", None) => Err(io::Error::other(format!(
            "injected journal fault before the fdatasync of a `{kind}` record (test hook)"
        ))),
        ("block", Some(dir)) => block_until_released(kind, &PathBuf::from(dir)),
        _ => panic!("{JOURNAL_FAULT_ENV}={setting:?}: expected KIND:fail or KIND:block:DIR"),
    }
}

fn block_until_released(kind: &str, dir: &std::path::Path) -> io::Result<()> {
    std::fs::write(dir.join(format!("blocked.{kind}")), b"")?;
    let release = dir.join(format!("release.{kind}"));
    let deadline = Instant::now() + BLOCK_LIMIT;
    while !release.exists() {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "blocked `{kind}` journal write was never released (test hook)"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Hands the spawner's pause setting on to a spawner process being started (`command` clears
/// its environment).
pub fn pass_to_spawner(command: &mut std::process::Command) {
    if let Some(dir) = std::env::var_os(SPAWNER_PAUSE_ENV) {
        command.env(SPAWNER_PAUSE_ENV, dir);
    }
}

/// Called by the spawner when it has forked child `pid`, before it answers the daemon.
pub fn spawner_forked(pid: i32) {
    let Some(dir) = std::env::var_os(SPAWNER_PAUSE_ENV).map(PathBuf::from) else {
        return;
    };
    if std::fs::remove_file(dir.join("arm")).is_err() {
        return;
    }
    // A failure here leaves the test waiting for `forked` in vain: it fails, loudly enough.
    let _ = std::fs::write(dir.join("forked"), pid.to_string());
    let release = dir.join("release");
    let deadline = Instant::now() + BLOCK_LIMIT;
    while !release.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}
