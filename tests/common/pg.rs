//! A throwaway PostgreSQL cluster for integration tests.
//!
//! [`PgCluster::start`] runs `initdb` and then `postgres` directly (no `pg_ctl`, whose `start`
//! goes through `/bin/sh`) in a fresh directory under `/tmp`, as an unprivileged uid: the
//! invoking user, or — when the tests run as root, which PostgreSQL refuses — the existing
//! `postgres` system account, falling back to `nobody`. No account is ever created.
//!
//! Invariants:
//! - The server listens only on a Unix socket inside the private temp directory
//!   (`listen_addresses = ''`); nothing is reachable over TCP.
//! - Authentication is `trust`; the cluster holds throwaway data only.
//! - Database [`DATABASE`] holds table `t(id int primary key, name text)` with the rows of
//!   [`T_ROWS`]; role [`AGENT_ROLE`] may log in and has SELECT/INSERT/UPDATE/DELETE on `t`, so a
//!   refused write proves the read-only transaction refused it, not a missing privilege.
//! - Dropping the value stops the server (fast shutdown, SIGKILL after 10 s) and deletes the
//!   directory.
//! - Under `CI=true` a missing binary or account is a panic; otherwise `start` returns `None`
//!   after saying loudly on stderr why the test is skipped.
//!
//! Each test crate includes this file with `#[path = "common/pg.rs"] mod pg;` and uses a subset.
#![allow(dead_code)] // shared by several test crates, each of which uses only part of it

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User, geteuid};
use tempfile::TempDir;

/// The psql every verb runs.
pub const PSQL: &str = "/usr/bin/psql";
/// Where Debian installs the server binaries, one directory per major version.
pub const PG_LIB_DIR: &str = "/usr/lib/postgresql";
/// The bootstrap superuser, used for setup only.
pub const SUPERUSER: &str = "postgres";
/// An ordinary login role with full DML on `t`, as a verb would connect.
pub const AGENT_ROLE: &str = "agent";
/// The test database.
pub const DATABASE: &str = "verbd";
/// The port number (only names the socket file: no TCP listener).
pub const PORT: u16 = 5432;
/// `PGOPTIONS` of a SQL verb: every transaction read-only, statements time-boxed.
pub const READ_ONLY_PGOPTIONS: &str = "-c default_transaction_read_only=on -c statement_timeout=5s";
/// The rows of table `t`, in id order.
pub const T_ROWS: &[(i32, &str)] = &[(1, "alpha"), (2, "beta"), (3, "gamma")];

/// A running throwaway cluster; stopped and deleted on drop.
pub struct PgCluster {
    root: TempDir,
    postmaster: Child,
    bin_dir: PathBuf,
}

/// Under CI a missing precondition fails the test; elsewhere it skips loudly.
fn skip_or_panic(reason: &str) -> Option<PgCluster> {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("PostgreSQL test precondition missing under CI: {reason}");
    }
    // Straight to fd 2 (like common/skip.rs, which crates that include both would load twice):
    // libtest captures `eprintln!` of a passing test.
    let banner = format!(
        "\n!!! SKIPPED PostgreSQL test: {reason} (install the `postgresql` package; \
         under CI=true this fails) !!!\n"
    );
    let _ = std::io::stderr().lock().write_all(banner.as_bytes());
    None
}

/// The newest `/usr/lib/postgresql/<major>/bin` that has `initdb` and `postgres`.
fn find_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(PG_LIB_DIR)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file()).then_some((major, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The uid/gid to run the server as: `None` means "as the current (non-root) user".
fn server_account() -> Result<Option<(u32, u32)>, String> {
    if !geteuid().is_root() {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(user)) = User::from_name(name) {
            return Ok(Some((user.uid.as_raw(), user.gid.as_raw())));
        }
    }
    Err("running as root and neither the `postgres` nor the `nobody` account exists".to_owned())
}

fn run_checked(command: &mut Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: cannot run: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl PgCluster {
    /// Creates, starts and populates a cluster; `None` if skipped (see the module docs).
    pub fn start() -> Option<PgCluster> {
        let Some(bin_dir) = find_bin_dir() else {
            return skip_or_panic(&format!("no {PG_LIB_DIR}/*/bin with initdb and postgres"));
        };
        if !Path::new(PSQL).exists() {
            return skip_or_panic(&format!("{PSQL} does not exist"));
        }
        let account = match server_account() {
            Ok(account) => account,
            Err(reason) => return skip_or_panic(&reason),
        };
        let as_account = |command: &mut Command| {
            if let Some((uid, gid)) = account {
                command.uid(uid).gid(gid);
            }
        };

        // A short path: the socket path must fit in sun_path (108 bytes).
        let root = tempfile::Builder::new()
            .prefix("verbd-pg-")
            .tempdir_in("/tmp")
            .expect("create the cluster directory");
        if let Some((uid, gid)) = account {
            chown(root.path(), Some(uid), Some(gid)).expect("chown the cluster directory");
        }
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o700))
            .expect("chmod the cluster directory");
        let data = root.path().join("data");

        let mut initdb = Command::new(bin_dir.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale"])
            .args(["--no-sync", "--no-instructions"])
            .env_clear()
            .current_dir(root.path());
        as_account(&mut initdb);
        run_checked(&mut initdb, "initdb");

        let mut conf = OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        writeln!(
            conf,
            "\n# verbd test harness\nlisten_addresses = ''\nunix_socket_directories = '{}'\n\
             port = {PORT}\nmax_connections = 20\nfsync = off\nsynchronous_commit = off\n\
             full_page_writes = off\nlog_min_messages = warning\n",
            root.path().display()
        )
        .expect("write postgresql.conf");

        let log = File::create(root.path().join("postgres.log")).expect("create the server log");
        let mut postgres = Command::new(bin_dir.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .env_clear()
            .current_dir(root.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup the log"))
            .stderr(log);
        as_account(&mut postgres);
        let postmaster = postgres.spawn().expect("spawn postgres");

        let mut cluster = PgCluster {
            root,
            postmaster,
            bin_dir,
        };
        cluster.wait_until_ready();
        cluster.populate();
        Some(cluster)
    }

    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.postmaster.try_wait().expect("poll postgres") {
                panic!("postgres exited early ({status}); log:\n{}", self.log());
            }
            let ready = Command::new(self.bin_dir.join("pg_isready"))
                .arg("-q")
                .arg("-h")
                .arg(self.socket_dir())
                .args(["-p", &PORT.to_string(), "-d", "postgres", "-U", SUPERUSER])
                .env_clear()
                .status()
                .expect("run pg_isready");
            if ready.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres not ready after 60 s; log:\n{}",
                self.log()
            );
            sleep(Duration::from_millis(100));
        }
    }

    fn populate(&self) {
        self.setup_in("postgres", &format!("CREATE DATABASE {DATABASE}"));
        let rows: Vec<String> = T_ROWS
            .iter()
            .map(|(id, name)| format!("({id}, '{name}')"))
            .collect();
        self.setup(&format!(
            "CREATE ROLE {AGENT_ROLE} LOGIN;\n\
             CREATE TABLE t (id int PRIMARY KEY, name text NOT NULL);\n\
             INSERT INTO t VALUES {};\n\
             GRANT SELECT, INSERT, UPDATE, DELETE ON t TO {AGENT_ROLE};",
            rows.join(", ")
        ));
    }

    /// Makes every role but the bootstrap superuser log in with a SCRAM-SHA-256 password
    /// (`trust` stays for [`SUPERUSER`], which sets up and inspects), and reloads the server.
    pub fn require_passwords(&self) {
        fs::write(
            self.root.path().join("data").join("pg_hba.conf"),
            format!("local all {SUPERUSER} trust\nlocal all all scram-sha-256\n"),
        )
        .expect("write pg_hba.conf");
        let output = self.psql_in("postgres", &["-At", "-c", "SELECT pg_reload_conf()"]);
        assert!(output.status.success(), "reload: {output:?}");
        // The postmaster re-reads pg_hba.conf on the signal; new sessions see it at once after.
        sleep(Duration::from_millis(300));
    }

    /// The directory holding the server's Unix socket (the `-h` argument).
    pub fn socket_dir(&self) -> &Path {
        self.root.path()
    }

    /// The cluster's private directory (also a handy place for marker files).
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.root.path().join("postgres.log")).unwrap_or_default()
    }

    /// Runs psql as the superuser on `database` with extra `args` (setup and inspection only).
    pub fn psql_in(&self, database: &str, args: &[&str]) -> Output {
        Command::new(PSQL)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.socket_dir())
            .args(["-p", &PORT.to_string(), "-U", SUPERUSER, "-d", database])
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .expect("run psql")
    }

    /// Runs psql as the superuser on [`DATABASE`] with extra `args`.
    pub fn psql(&self, args: &[&str]) -> Output {
        self.psql_in(DATABASE, args)
    }

    /// Runs setup SQL as the superuser on `database`, panicking with psql's stderr on failure.
    pub fn setup_in(&self, database: &str, sql: &str) {
        let output = self.psql_in(database, &["-c", sql]);
        assert!(
            output.status.success(),
            "setup SQL failed: {sql}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Runs setup SQL as the superuser on [`DATABASE`].
    pub fn setup(&self, sql: &str) {
        self.setup_in(DATABASE, sql);
    }

    /// The real psql binary of the server's version (`/usr/bin/psql` is a script wrapper, which
    /// a policy refuses as an interpreter).
    pub fn psql_binary(&self) -> PathBuf {
        self.bin_dir.join("psql")
    }

    /// The argv a SQL verb renders: psql without psqlrc, stopping on error, CSV output, the
    /// query as one `-c` element, connecting as [`AGENT_ROLE`].
    pub fn verb_argv(&self, sql: &str) -> Vec<String> {
        let socket = self.socket_dir().display().to_string();
        [
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "--csv",
            "-h",
            &socket,
            "-p",
            &PORT.to_string(),
            "-U",
            AGENT_ROLE,
            "-d",
            DATABASE,
            "-c",
            sql,
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect()
    }

    /// A [`Command`] exactly as a verb runs psql: [`Self::verb_argv`], the environment cleared
    /// except `PGOPTIONS` = [`READ_ONLY_PGOPTIONS`], no stdin.
    pub fn verb_command(&self, sql: &str) -> Command {
        let mut command = Command::new(PSQL);
        command
            .args(self.verb_argv(sql))
            .env_clear()
            .env("PGOPTIONS", READ_ONLY_PGOPTIONS)
            .stdin(Stdio::null());
        command
    }

    /// Runs [`Self::verb_command`] to completion.
    pub fn verb_psql(&self, sql: &str) -> Output {
        self.verb_command(sql).output().expect("run psql")
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.postmaster.id() as i32);
        // SIGINT is PostgreSQL's "fast" shutdown: abort sessions, checkpoint, exit.
        if kill(pid, Signal::SIGINT).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.postmaster.try_wait() {
                    return;
                }
                sleep(Duration::from_millis(50));
            }
        }
        let _ = self.postmaster.kill();
        let _ = self.postmaster.wait();
    }
}
