//! Test harness: a real `verbd serve` on a temp socket, and real clients.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response};

#[path = "digest.rs"]
pub mod digest;
#[path = "harness.rs"]
pub mod harness;
#[path = "policy.rs"]
pub mod policy;
#[path = "skip.rs"]
pub mod skip;

pub const BIN: &str = env!("CARGO_BIN_EXE_verbd");

/// Tests that need root: fail under CI, skip loudly otherwise.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip::skip_or_fail(test, "needs root (run the tests as root)");
    false
}

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub policy: PathBuf,
    pub log: PathBuf,
}

/// A temp dir others may traverse (the daemon may drop to an unprivileged user).
pub fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("verbd-test-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

impl Daemon {
    /// Start a daemon on `policy` (`@DIR@` is replaced with the test's temp dir).
    pub fn start(policy: &str) -> Daemon {
        Self::start_with(policy, |_| {})
    }

    pub fn start_with(policy: &str, setup: impl FnOnce(&Path)) -> Daemon {
        let dir = open_tempdir();
        setup(dir.path());
        let d = Self::spawn_in(dir, policy, &[]);
        d.wait_ready();
        d
    }

    /// Spawn without waiting (for tests of start-up failures).
    pub fn spawn_in(dir: tempfile::TempDir, policy: &str, env: &[(&str, &str)]) -> Daemon {
        Self::spawn_configured(dir, policy, |cmd| {
            for (k, v) in env {
                cmd.env(k, v);
            }
        })
    }

    /// Start a daemon whose descriptor limit (soft and hard) is `open_files` from its start.
    pub fn start_with_open_files(
        policy: &str,
        open_files: u64,
        setup: impl FnOnce(&Path),
    ) -> Daemon {
        use std::os::unix::process::CommandExt;
        let dir = open_tempdir();
        setup(dir.path());
        let d = Self::spawn_configured(dir, policy, |cmd| {
            // SAFETY: only setrlimit (async-signal-safe) runs between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::resource::setrlimit(
                        nix::sys::resource::Resource::RLIMIT_NOFILE,
                        open_files,
                        open_files,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        });
        d.wait_ready();
        d
    }

    fn spawn_configured(
        dir: tempfile::TempDir,
        policy: &str,
        configure: impl FnOnce(&mut Command),
    ) -> Daemon {
        let policy_text = policy.replace("@DIR@", dir.path().to_str().unwrap());
        let policy_path = dir.path().join("policy.toml");
        std::fs::write(&policy_path, policy_text).unwrap();
        let socket = dir.path().join("verbd.sock");
        let state = dir.path().join("state");
        let log = dir.path().join("daemon.log");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        configure(&mut cmd);
        let child = cmd.spawn().expect("spawn verbd serve");
        Daemon {
            child: Some(child),
            dir,
            socket,
            state,
            policy: policy_path,
            log,
        }
    }

    /// Start the daemon again on the same policy file, socket and state dir.
    pub fn respawn(&mut self) {
        self.stop();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--policy")
            .arg(&self.policy)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.log)
                    .unwrap(),
            );
        self.child = Some(cmd.spawn().expect("spawn verbd serve"));
        self.wait_ready();
    }

    /// Let every uid reach the socket (tests act as several unprivileged users).
    pub fn open_socket(&self) {
        std::fs::set_permissions(&self.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    }

    /// Run the CLI as another uid (and gid), like a different person or agent would.
    pub fn cli_as(&self, uid: u32, args: &[&str]) -> Output {
        use std::os::unix::process::CommandExt;
        Command::new(BIN)
            .args(args)
            .env("VERBD_SOCKET", &self.socket)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon did not start; its log:\n{}", self.log());
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn journal(&self) -> String {
        std::fs::read_to_string(self.state.join("journal.jsonl")).unwrap_or_default()
    }

    /// The journal's events as JSON objects (the event part of each record).
    pub fn journal_events(&self) -> Vec<serde_json::Value> {
        self.journal()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|mut v| match v.get_mut("event") {
                Some(e) => e.take(),
                None => v,
            })
            .collect()
    }

    pub fn request(&self, req: &Request) -> Response {
        verbd::client::request(&self.socket, req, Duration::from_secs(60)).expect("daemon answers")
    }

    pub fn call(&self, verb: &str, args: &[(&str, &str)]) -> Response {
        let args: BTreeMap<String, serde_json::Value> = args
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        self.request(&Request::Call {
            verb: verb.into(),
            args,
            reason: None,
            idempotency_key: None,
            stream: None,
        })
    }

    /// Run the CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("VERBD_SOCKET", &self.socket)
            .output()
            .unwrap()
    }

    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// stdout of a verb that ran, or a panic with the response.
pub fn stdout_of(response: &Response) -> String {
    match response {
        Response::Ok { result, .. } => result.stdout.clone(),
        other => panic!("expected ok, got {other:?}"),
    }
}

/// Processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// The accounts the package creates on install (`systemd-sysusers` with
/// systemd/sysusers.d/verbd.conf: verbd, verbd-agents, verbd-approvers, verbd-metrics), for
/// commands run through [`PackageAccounts::command`]: copies of /etc/passwd and /etc/group with
/// them added, bind-mounted in a private mount namespace, so the host's files never change.
/// Needs root (a mount namespace) and systemd-sysusers.
pub struct PackageAccounts {
    dir: tempfile::TempDir,
}

impl PackageAccounts {
    pub fn create() -> PackageAccounts {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        for name in ["passwd", "group", "shadow", "gshadow"] {
            let host = Path::new("/etc").join(name);
            if host.exists() {
                std::fs::copy(&host, etc.join(name)).unwrap();
            }
        }
        let sysusers = Command::new("systemd-sysusers")
            .arg(format!("--root={}", dir.path().display()))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/sysusers.d/verbd.conf"))
            .output()
            .expect("run systemd-sysusers");
        assert!(sysusers.status.success(), "systemd-sysusers: {sysusers:?}");
        PackageAccounts { dir }
    }

    /// `program args…` with the package's accounts visible to it (and its children).
    pub fn command(&self, program: &str) -> Command {
        let etc = self.dir.path().join("etc");
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(etc.join("passwd"))
            .arg(etc.join("group"))
            .arg(program);
        command
    }
}
