//! Approving from elsewhere through an SSH-forwarded approver socket, end to end with a real
//! OpenSSH server on localhost (key authentication, docs/fleet.md's sshd block verbatim) and a
//! real `verbd serve`: the daemon sees the uid of the sshd session, so an approval through the
//! forward is the approver's, and an agent account that can log in by SSH cannot forward to the
//! approver socket at all.
//!
//! The test accounts exist only inside sshd's private mount namespace (bind-mounted copies of
//! /etc/passwd and /etc/group), so nothing is added to the host's user database.
use crate::common;
use common::policy::{Category, Param, ParamType, Policy, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const APPROVER_UID: u32 = 61501;
const AGENT_UID: u32 = 61502;
const APPROVERS_GID: u32 = 61510;
/// A hostile account on the approver's laptop (it exists only there, not on the host).
const LAPTOP_HOSTILE_UID: u32 = 61503;
const SSHD: &str = "/usr/sbin/sshd";

fn have_tools() -> bool {
    for tool in [SSHD, "/usr/bin/ssh", "/usr/bin/ssh-keygen"] {
        if !Path::new(tool).exists() {
            common::skip::skip_or_fail(
                "fleet_ssh",
                &format!("{tool} is missing (install openssh-server; .ci/run does)"),
            );
            return false;
        }
    }
    true
}

/// docs/fleet.md's sshd block for approvers, as written.
fn documented_sshd_block() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fleet.md")).unwrap();
    let start = doc
        .find("```\n# /etc/ssh/sshd_config.d/verbd-approvers.conf\n")
        .expect("docs/fleet.md has the sshd block");
    let block = &doc[start + 4..];
    block[..block.find("```").unwrap()].to_string()
}

fn run(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{command:?}: {out:?}");
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// An account with a home holding `authorized_keys` for `public_key`.
fn make_home(server: &Path, name: &str, uid: u32, public_key: &str) -> PathBuf {
    let home = server.join("home").join(name);
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("authorized_keys"), public_key).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        ssh.join("authorized_keys"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    for path in [&home, &ssh, &ssh.join("authorized_keys")] {
        chown(path, uid, uid);
    }
    home
}

/// A real sshd on 127.0.0.1, in private mount and PID namespaces where the test accounts exist.
struct Sshd {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Sshd {
    /// sshd with `config_tail` after the test's own settings.
    fn start(server: &Path, approver_key: &str, agent_key: &str, config_tail: &str) -> Sshd {
        std::fs::set_permissions(server, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(server.join("home")).unwrap();
        std::fs::set_permissions(server.join("home"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let approver_home = make_home(server, "approver", APPROVER_UID, approver_key);
        let agent_home = make_home(server, "agent", AGENT_UID, agent_key);
        let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        passwd.push_str(&format!(
            "approver:x:{APPROVER_UID}:{APPROVER_UID}::{}:/usr/sbin/nologin\n\
             agent:x:{AGENT_UID}:{AGENT_UID}::{}:/usr/sbin/nologin\n",
            approver_home.display(),
            agent_home.display()
        ));
        let mut group = std::fs::read_to_string("/etc/group").unwrap();
        group.push_str(&format!(
            "approver:x:{APPROVER_UID}:\nagent:x:{AGENT_UID}:\nverbd-approvers:x:{APPROVERS_GID}:approver\n"
        ));
        std::fs::write(server.join("passwd"), passwd).unwrap();
        std::fs::write(server.join("group"), group).unwrap();
        let host_key = server.join("host_key");
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "test-host", "-f"])
            .arg(&host_key));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = server.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\nPidFile none\n\
                 AuthorizedKeysFile .ssh/authorized_keys\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes yes\nLogLevel VERBOSE\n{}",
                host_key.display(),
                config_tail
            ),
        )
        .unwrap();
        let log = server.join("sshd.log");
        let script = format!(
            "mount --bind {passwd} /etc/passwd && mount --bind {group} /etc/group \
             && mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -m 0755 /run/sshd \
             && exec {SSHD} -D -e -f {config}",
            passwd = server.join("passwd").display(),
            group = server.join("group").display(),
            config = config.display()
        );
        // A PID namespace too: killing `unshare` kills its child (--kill-child), the namespace's
        // init, and with it every sshd session process, so none outlives the test.
        let child = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .args([
                "--mount",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let sshd = Sshd { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen: {}",
                sshd.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sshd
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The approver's laptop: a key, a known_hosts entry, and `ssh -N -L` as docs/fleet.md says.
struct Laptop {
    dir: tempfile::TempDir,
}

impl Laptop {
    fn new(name: &str) -> Laptop {
        let dir = tempfile::Builder::new()
            .prefix(&format!("verbd-laptop-{name}-"))
            .tempdir()
            .unwrap();
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(dir.path().join("key")));
        Laptop { dir }
    }

    fn public_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("key.pub")).unwrap()
    }

    /// `ssh -N -o ExitOnForwardFailure=yes -L ./verbd-approve.sock:REMOTE user@host`, from the
    /// laptop's directory; returns the child and the local socket once it exists.
    fn forward(&self, sshd: &Sshd, server: &Path, user: &str, remote: &Path) -> (Child, PathBuf) {
        self.forward_with(sshd, server, user, remote, &[])
    }

    /// [`Laptop::forward`] with more ssh options.
    fn forward_with(
        &self,
        sshd: &Sshd,
        server: &Path,
        user: &str,
        remote: &Path,
        options: &[&str],
    ) -> (Child, PathBuf) {
        let known_hosts = self.dir.path().join("known_hosts");
        let host_key = std::fs::read_to_string(server.join("host_key.pub")).unwrap();
        std::fs::write(
            &known_hosts,
            format!("[127.0.0.1]:{} {host_key}", sshd.port),
        )
        .unwrap();
        let child = Command::new("ssh")
            .current_dir(self.dir.path())
            .args(["-F", "/dev/null", "-i", "key", "-o", "IdentitiesOnly=yes"])
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-p", &sshd.port.to_string()])
            .args(options)
            .args(["-N", "-o", "ExitOnForwardFailure=yes", "-L"])
            .arg(format!("./verbd-approve.sock:{}", remote.display()))
            .arg(format!("{user}@127.0.0.1"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("ssh.log")).unwrap())
            .spawn()
            .unwrap();
        let local = self.dir.path().join("verbd-approve.sock");
        let deadline = Instant::now() + Duration::from_secs(15);
        while !local.exists() {
            assert!(
                Instant::now() < deadline,
                "ssh never created the forward: {}\nsshd: {}",
                std::fs::read_to_string(self.dir.path().join("ssh.log")).unwrap_or_default(),
                sshd.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        (child, local)
    }

    /// `ssh -N -o ExitOnForwardFailure=yes -R REMOTE:./verbd-approve.sock user@host`: the
    /// remote forward of a Unix socket, from the laptop to a socket on the host; how ssh ended.
    fn remote_forward(
        &self,
        sshd: &Sshd,
        server: &Path,
        user: &str,
        remote: &Path,
    ) -> std::process::ExitStatus {
        let known_hosts = self.dir.path().join("known_hosts");
        let host_key = std::fs::read_to_string(server.join("host_key.pub")).unwrap();
        std::fs::write(
            &known_hosts,
            format!("[127.0.0.1]:{} {host_key}", sshd.port),
        )
        .unwrap();
        let mut child = Command::new("ssh")
            .current_dir(self.dir.path())
            .args(["-F", "/dev/null", "-i", "key", "-o", "IdentitiesOnly=yes"])
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-p", &sshd.port.to_string()])
            .args(["-N", "-o", "ExitOnForwardFailure=yes", "-R"])
            .arg(format!("{}:./verbd-approve.sock", remote.display()))
            .arg(format!("{user}@127.0.0.1"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("ssh-R.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                stop(child);
                panic!("ssh -R as {user} is still up: the forward was accepted");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `verbd ARGS --socket ./verbd-approve.sock`, run on the laptop.
    fn verbd(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .current_dir(self.dir.path())
            .args(args)
            .args(["--socket", "./verbd-approve.sock"])
            .env_remove("VERBD_SOCKET")
            .output()
            .unwrap()
    }
}

/// A child killed when dropped (also when an assertion fails first).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .approver_socket("@DIR@/approve.sock")
        .agents("agent", &[AGENT_UID])
        .humans("oncall", &[APPROVER_UID])
        .approvers(&["oncall"])
        .verb(
            "restart",
            Verb::command(Category::Mutating, "/bin/echo restarted {unit}")
                .description("restart a unit")
                .roles(&["agent"])
                .param("unit", Param::of(ParamType::SystemdUnit)),
        )
}

/// What every test here starts from: a daemon whose approver socket is as the socket unit
/// makes it (root:verbd-approvers 0660), the approver's and the agent's laptops, a real sshd
/// configured with `config_tail`, and the agent's pending proposal (its id, and its hash's
/// first 16 digits).
struct Scene {
    d: Daemon,
    approve_socket: PathBuf,
    approver_laptop: Laptop,
    agent_laptop: Laptop,
    server: tempfile::TempDir,
    sshd: Sshd,
    id: String,
    hash: String,
}

fn scene(config_tail: &str) -> Scene {
    let d = Daemon::start(&policy().render());
    d.open_socket();
    let approve_socket = d.path("approve.sock");
    chown(&approve_socket, 0, APPROVERS_GID);
    std::fs::set_permissions(&approve_socket, std::fs::Permissions::from_mode(0o660)).unwrap();
    let approver_laptop = Laptop::new("approver");
    let agent_laptop = Laptop::new("agent");
    let server = tempfile::Builder::new()
        .prefix("verbd-sshd-")
        .tempdir()
        .unwrap();
    let sshd = Sshd::start(
        server.path(),
        &approver_laptop.public_key(),
        &agent_laptop.public_key(),
        config_tail,
    );
    let proposed = d.propose_as(AGENT_UID, &["restart", "unit=nginx.service"]);
    Scene {
        d,
        approve_socket,
        approver_laptop,
        agent_laptop,
        server,
        sshd,
        id: proposed.id.to_string(),
        hash: proposed.hash[..16].to_string(),
    }
}

#[test]
fn an_approval_through_an_ssh_forward_is_the_sshd_sessions_uid() {
    if !require_root("an_approval_through_an_ssh_forward_is_the_sshd_sessions_uid") || !have_tools()
    {
        return;
    }
    let Scene {
        d,
        approve_socket,
        approver_laptop,
        agent_laptop,
        server,
        sshd,
        id,
        hash,
    } = scene(&documented_sshd_block());

    // The attack: the agent account can log in by SSH too and forwards the approver socket.
    let (agent_ssh, _) = agent_laptop.forward(&sshd, server.path(), "agent", &approve_socket);
    let out = agent_laptop.verbd(&["approve", &id, "--hash", &hash]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("agent through its own forward: {:?} {said}", out.status);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    stop(agent_ssh);
    let sshd_log = sshd.log();
    assert!(
        sshd_log.contains("refused streamlocal port forward")
            || sshd_log.contains("streamlocal forwarding disabled"),
        "sshd refused the agent's forward: {sshd_log}"
    );

    // The approver, from their laptop, through the forward: ssh made the local end private.
    let (approver_ssh, local) =
        approver_laptop.forward(&sshd, server.path(), "approver", &approve_socket);
    let mode = std::fs::metadata(&local).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "the laptop's socket is the approver: ssh keeps it private"
    );
    let out = approver_laptop.verbd(&["pending"]);
    assert!(out.status.success(), "{out:?}\nsshd: {}", sshd.log());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("approve:     verbd approve {id} --hash {hash}")),
        "{out:?}"
    );
    // The notification for it, as `verbd notify … --approve-socket ./verbd-approve.sock` words
    // it; its approve line is run word for word on the laptop.
    let out = approver_laptop.verbd(&["pending", "--json"]);
    let pending: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut print = Command::new(BIN)
        .args([
            "notify",
            "print",
            "--approve-socket",
            "./verbd-approve.sock",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut print.stdin.take().unwrap(),
        pending[0].to_string().as_bytes(),
    )
    .unwrap();
    let printed = print.wait_with_output().unwrap();
    assert!(printed.status.success(), "{printed:?} for {pending}");
    let message = String::from_utf8(printed.stdout).unwrap();
    let approve_line = message
        .lines()
        .find_map(|l| l.strip_prefix("approve:"))
        .expect("an approve line")
        .trim();
    assert_eq!(
        approve_line,
        format!("verbd approve {id} --hash {hash} --socket ./verbd-approve.sock")
    );
    let words = shell_words::split(approve_line).unwrap();
    let out = Command::new(BIN)
        .current_dir(approver_laptop.dir.path())
        .args(&words[1..])
        .env_remove("VERBD_SOCKET")
        .output()
        .unwrap();
    println!(
        "approver through the forward: {:?} {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{out:?}\nsshd: {}", sshd.log());
    stop(approver_ssh);

    let events = d.journal_events();
    let approved: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "proposal_approved")
        .collect();
    assert_eq!(approved.len(), 1, "{events:?}");
    assert_eq!(
        approved[0]["by"]["uid"], APPROVER_UID,
        "the sshd session's uid"
    );
    let ran: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "exec" && e["decision"] == "approved")
        .collect();
    assert_eq!(ran.len(), 1);
    assert_eq!(
        ran[0]["caller"]["uid"], AGENT_UID,
        "the run is the requester's"
    );
}

#[test]
fn each_layer_holds_when_the_one_before_it_is_misconfigured() {
    if !require_root("each_layer_holds_when_the_one_before_it_is_misconfigured") || !have_tools() {
        return;
    }
    // sshd without the approvers block: every account may forward to Unix sockets.
    let Scene {
        d,
        approve_socket,
        approver_laptop,
        agent_laptop,
        server,
        sshd,
        id,
        hash,
    } = scene("AllowStreamLocalForwarding yes\nAllowTcpForwarding yes\n");

    // Second layer: the agent's session is not in verbd-approvers, the socket is 0660.
    let (agent_ssh, _) = agent_laptop.forward(&sshd, server.path(), "agent", &approve_socket);
    let out = agent_laptop.verbd(&["approve", &id, "--hash", &hash]);
    println!(
        "agent, sshd open, socket 0660: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(
        sshd.log().contains("Permission denied"),
        "the session could not connect: {}",
        sshd.log()
    );

    // Third layer: the socket open to everyone too; the daemon sees the agent's uid and refuses.
    std::fs::set_permissions(&approve_socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = agent_laptop.verbd(&["approve", &id, "--hash", &hash]);
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    println!("agent, sshd open, socket 0666: {:?} {said}", out.status);
    assert_eq!(out.status.code(), Some(77), "{said}");
    stop(agent_ssh);
    let events = d.journal_events();
    assert!(
        events.iter().all(|e| e["kind"] != "proposal_approved"),
        "nothing was approved: {events:?}"
    );
    let refused: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "approval_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0]["by"]["uid"], AGENT_UID, "the sshd session's uid");

    // Positive control on the same sshd: the approver's forward approves.
    let (approver_ssh, _) =
        approver_laptop.forward(&sshd, server.path(), "approver", &approve_socket);
    let out = approver_laptop.verbd(&["approve", &id, "--hash", &hash]);
    assert!(out.status.success(), "{out:?}");
    stop(approver_ssh);
}

/// A hostile account on the approver's laptop (uid 61503: say, an agent run under another uid
/// there), and the approver working in a directory every account may write (mode 1777, as
/// /tmp). It connects to the live forward; then, once the session has ended, it puts its own
/// socket (and then a symlink to it) where the approver's next forward goes, answering as if it
/// were the daemon. And on the host, approver and agent accounts try `ssh -R` to put a socket
/// there.
#[test]
fn a_hostile_account_cannot_use_or_take_the_forwarded_socket() {
    if !require_root("a_hostile_account_cannot_use_or_take_the_forwarded_socket") || !have_tools() {
        return;
    }
    let Scene {
        d,
        approve_socket,
        approver_laptop,
        agent_laptop,
        server,
        sshd,
        id,
        hash,
    } = scene(&documented_sshd_block());
    let shared = approver_laptop.dir.path();
    std::fs::set_permissions(shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let local = shared.join("verbd-approve.sock");
    let as_hostile = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .arg("--socket")
            .arg(&local)
            .env_remove("VERBD_SOCKET")
            .uid(LAPTOP_HOSTILE_UID)
            .gid(LAPTOP_HOSTILE_UID)
            .output()
            .unwrap()
    };

    // 1. The live forward: ssh made the laptop's end the approver's alone.
    let (approver_ssh, _) =
        approver_laptop.forward(&sshd, server.path(), "approver", &approve_socket);
    let out = as_hostile(&["approve", &id, "--hash", &hash]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("hostile uid on the live forward: {:?} {said}", out.status);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(said.contains("Permission denied"), "{said}");
    stop(approver_ssh);
    // ssh leaves the laptop's end behind when the session ends: nothing answers on it, and a
    // new forward cannot bind over it unless told to (`StreamLocalBindUnlink`, docs/fleet.md).
    assert!(
        local.exists(),
        "ssh removed its socket: the docs say it stays"
    );
    let out = approver_laptop.verbd(&["pending"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("the approver on the stale end: {:?} {said}", out.status);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(said.contains("Connection refused"), "{said}");
    let (approver_ssh, _) = approver_laptop.forward_with(
        &sshd,
        server.path(),
        "approver",
        &approve_socket,
        &["-o", "StreamLocalBindUnlink=yes"],
    );
    // The stale end is there already: wait for ssh to have replaced it.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut out = approver_laptop.verbd(&["pending"]);
    while !out.status.success() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        out = approver_laptop.verbd(&["pending"]);
    }
    assert!(
        out.status.success(),
        "a new forward with StreamLocalBindUnlink: {out:?}"
    );
    stop(approver_ssh);
    std::fs::remove_file(&local).unwrap();

    // 2. The hostile account's own socket at the path, then a symlink to one elsewhere. The
    // approver's forward cannot bind over it (ssh exits); the approver's verbd must not take
    // the planted server for the daemon.
    let fake = verbd::protocol::Response::Decided {
        id: id.parse().unwrap(),
        state: verbd::protocol::State::Succeeded,
        message: "approved and ran (a planted answer)".into(),
    };
    let fake_line = String::from_utf8(fake.encode()).unwrap();
    let elsewhere = open_tempdir();
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    for planted in ["a socket", "a symlink"] {
        let listen_at = match planted {
            "a socket" => local.clone(),
            _ => elsewhere.path().join("fake.sock"),
        };
        let fake_daemon = Killed(Command::new("python3")
            .args([
                "-c",
                "import os, socket, sys\n\
                 s = socket.socket(socket.AF_UNIX)\n\
                 s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)\n\
                 while True:\n    c, _ = s.accept(); c.recv(65536); c.sendall(sys.argv[2].encode()); c.close()\n",
            ])
            .arg(&listen_at)
            .arg(fake_line.trim_end().to_string() + "\n")
            .uid(LAPTOP_HOSTILE_UID)
            .gid(LAPTOP_HOSTILE_UID)
            .spawn()
            .unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listen_at.exists() {
            assert!(
                Instant::now() < deadline,
                "the planted socket never appeared"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if planted == "a symlink" {
            let link = Command::new("ln")
                .arg("-s")
                .arg(&listen_at)
                .arg(&local)
                .uid(LAPTOP_HOSTILE_UID)
                .gid(LAPTOP_HOSTILE_UID)
                .status()
                .unwrap();
            assert!(link.success());
        }
        let (approver_ssh, _) =
            approver_laptop.forward(&sshd, server.path(), "approver", &approve_socket);
        std::thread::sleep(Duration::from_millis(500));
        let ssh_log = std::fs::read_to_string(shared.join("ssh.log")).unwrap_or_default();
        let out = approver_laptop.verbd(&["approve", &id, "--hash", &hash]);
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        println!(
            "{planted} planted at the path: ssh said {:?}; the approver's verbd: {:?} {said}",
            ssh_log.trim(),
            out.status
        );
        assert!(
            !said.contains("planted"),
            "the approver read the planted answer: {said}"
        );
        assert_eq!(out.status.code(), Some(69), "{said}");
        assert!(
            said.contains(&format!("uid {LAPTOP_HOSTILE_UID}")),
            "the refusal names the socket's owner: {said}"
        );
        stop(approver_ssh);
        drop(fake_daemon);
        let _ = std::fs::remove_file(&local);
        let _ = std::fs::remove_file(&listen_at);
    }

    // 3. `ssh -R`: neither account may put a forwarded socket on the host.
    for (laptop, user) in [(&agent_laptop, "agent"), (&approver_laptop, "approver")] {
        let remote = server.path().join(format!("{user}-remote.sock"));
        let status = laptop.remote_forward(&sshd, server.path(), user, &remote);
        let said = std::fs::read_to_string(laptop.dir.path().join("ssh-R.log")).unwrap();
        println!("ssh -R as {user}: {status:?} {}", said.trim());
        assert!(!status.success(), "{user}'s remote forward was accepted");
        assert!(said.contains("remote port forwarding failed"), "{said}");
        assert!(!remote.exists(), "{user} put a socket on the host");
    }
    assert!(
        d.journal_events()
            .iter()
            .all(|e| e["kind"] != "proposal_approved"),
        "nothing was approved"
    );
}
