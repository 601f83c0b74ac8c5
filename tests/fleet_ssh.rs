//! Approving from elsewhere through an SSH-forwarded approver socket, end to end with a real
//! OpenSSH server on localhost (key authentication, docs/fleet.md's sshd block verbatim) and a
//! real `verbd serve`: the daemon sees the uid of the sshd session, so an approval through the
//! forward is the approver's, and an agent account that can log in by SSH cannot forward to the
//! approver socket at all.
//!
//! The test accounts exist only inside sshd's private mount namespace (bind-mounted copies of
//! /etc/passwd and /etc/group), so nothing is added to the host's user database.
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const APPROVER_UID: u32 = 61501;
const AGENT_UID: u32 = 61502;
const APPROVERS_GID: u32 = 61510;
const SSHD: &str = "/usr/sbin/sshd";

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn have_tools() -> bool {
    for tool in [SSHD, "/usr/bin/ssh", "/usr/bin/ssh-keygen"] {
        if !Path::new(tool).exists() {
            assert!(
                !ci(),
                "CI=true but {tool} is missing (.ci/run installs openssh-server)"
            );
            common::skip::announce(&format!(
                "SKIPPED: {tool} is missing (install openssh-server)"
            ));
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

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
shutdown_grace = "1s"
approver_socket = "@DIR@/approve.sock"
[roles.agent]
uids = [61502]
[roles.oncall]
kind = "human"
uids = [61501]
[approvals]
approvers = ["oncall"]

[verb.restart]
description = "restart a unit"
category = "mutating"
roles = ["agent"]
command = "/bin/echo restarted {unit}"
params.unit = { type = "systemd-unit" }
"#;

#[test]
fn an_approval_through_an_ssh_forward_is_the_sshd_sessions_uid() {
    if !require_root("an_approval_through_an_ssh_forward_is_the_sshd_sessions_uid") || !have_tools()
    {
        return;
    }
    let d = Daemon::start(POLICY);
    d.open_socket();
    // The approver socket as the socket unit makes it: root:verbd-approvers 0660.
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
        &documented_sshd_block(),
    );

    let out = d.cli_as(
        AGENT_UID,
        &["call", "--json", "restart", "unit=nginx.service"],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let proposal: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = proposal["id"].as_u64().unwrap().to_string();
    let hash = proposal["hash"].as_str().unwrap()[..16].to_string();

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
    let d = Daemon::start(POLICY);
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
    // sshd without the approvers block: every account may forward to Unix sockets.
    let sshd = Sshd::start(
        server.path(),
        &approver_laptop.public_key(),
        &agent_laptop.public_key(),
        "AllowStreamLocalForwarding yes\nAllowTcpForwarding yes\n",
    );
    let out = d.cli_as(
        AGENT_UID,
        &["call", "--json", "restart", "unit=nginx.service"],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let proposal: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = proposal["id"].as_u64().unwrap().to_string();
    let hash = proposal["hash"].as_str().unwrap()[..16].to_string();

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
