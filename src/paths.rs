//! Default locations of the daemon's state and socket, shared by `serve` and the clients.
//!
//! A client given neither `--socket` nor `VERBD_SOCKET` connects to the first usable socket of:
//! the one `verbd serve` binds by default for this user, then the packaged daemon's sockets
//! (`systemd/verbd.socket`, `systemd/verbd-approve.socket`), the one for the command's side
//! first. Usable means a socket this user may connect to (write permission); the per-user
//! paths are writable only by their owner, `/run/verbd` only by root, so nobody else can put a
//! socket where a client looks.
#![forbid(unsafe_code)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The agents' socket of the packaged daemon (`systemd/verbd.socket`).
pub const SYSTEM_AGENT_SOCKET: &str = "/run/verbd/verbd.sock";
/// The approvers' socket of the packaged daemon (`systemd/verbd-approve.socket`).
pub const SYSTEM_APPROVER_SOCKET: &str = "/run/verbd/approve.sock";

/// Which side a client command is on: decides which packaged socket it tries first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientSide {
    /// Agents' commands (`call`, `list`, `wait`, `result`, `status`, `mcp`, the hook).
    Agent,
    /// Approvers' commands (`pending`, `approve`, `deny`, `resolve`, `reload`).
    Approver,
}

/// Where `serve` puts its state when neither flag nor policy says: `/var/lib/verbd` for root,
/// else `$XDG_STATE_HOME/verbd`, `~/.local/state/verbd`, or `/tmp/verbd-UID`.
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/verbd");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| Path::new(d).is_absolute()) {
        return PathBuf::from(dir).join("verbd");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/verbd"),
        None => PathBuf::from("/tmp").join(format!("verbd-{}", nix::unistd::getuid())),
    }
}

/// Where a client on `side` connects when neither `--socket` nor `VERBD_SOCKET` says (see the
/// module's documentation). When no candidate is usable: the first that exists (so the error
/// says why it cannot be used), else the per-user default (so it names where `serve` would be).
pub fn client_socket(side: ClientSide) -> PathBuf {
    choose_socket(&client_socket_candidates(side))
}

/// The sockets a client on `side` tries, in order.
pub fn client_socket_candidates(side: ClientSide) -> [PathBuf; 3] {
    let (first, second) = match side {
        ClientSide::Agent => (SYSTEM_AGENT_SOCKET, SYSTEM_APPROVER_SOCKET),
        ClientSide::Approver => (SYSTEM_APPROVER_SOCKET, SYSTEM_AGENT_SOCKET),
    };
    [
        socket_path_in(&default_state_dir()),
        PathBuf::from(first),
        PathBuf::from(second),
    ]
}

fn choose_socket(candidates: &[PathBuf]) -> PathBuf {
    let existing: Vec<&PathBuf> = candidates
        .iter()
        .filter(|path| std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_socket()))
        .collect();
    let may_connect = |path: &PathBuf| {
        nix::unistd::access(path.as_path(), nix::unistd::AccessFlags::W_OK).is_ok()
    };
    existing
        .iter()
        .find(|path| may_connect(path))
        .or(existing.first())
        .map_or_else(|| candidates[0].clone(), |path| (*path).clone())
}

/// The socket `serve` uses when neither flag nor policy says: `$XDG_RUNTIME_DIR/verbd.sock`,
/// else inside its state dir.
pub fn socket_path_in(state_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_absolute()) {
        Some(dir) => PathBuf::from(dir).join("verbd.sock"),
        None => state_dir.join("verbd.sock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn socket(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        let listener = UnixListener::bind(&path).unwrap();
        std::mem::forget(listener);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_first_socket_there_is_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("mine.sock");
        let system = socket(dir.path(), "system.sock", 0o666);
        let other = socket(dir.path(), "other.sock", 0o666);
        assert_eq!(
            choose_socket(&[mine.clone(), system.clone(), other.clone()]),
            system
        );
        let mine = socket(dir.path(), "mine.sock", 0o600);
        assert_eq!(choose_socket(&[mine.clone(), system, other]), mine);
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        let system = socket(dir.path(), "system.sock", 0o666);
        assert_eq!(choose_socket(&[plain, system.clone()]), system);
    }

    #[test]
    fn with_no_socket_the_per_user_default_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("mine.sock");
        assert_eq!(
            choose_socket(&[mine.clone(), dir.path().join("x.sock")]),
            mine
        );
    }

    #[test]
    fn each_side_tries_its_own_packaged_socket_first() {
        let agent = client_socket_candidates(ClientSide::Agent);
        let approver = client_socket_candidates(ClientSide::Approver);
        assert_eq!(agent[1], Path::new(SYSTEM_AGENT_SOCKET));
        assert_eq!(agent[2], Path::new(SYSTEM_APPROVER_SOCKET));
        assert_eq!(approver[1], Path::new(SYSTEM_APPROVER_SOCKET));
        assert_eq!(approver[2], Path::new(SYSTEM_AGENT_SOCKET));
        assert_eq!(agent[0], approver[0]);
    }
}
