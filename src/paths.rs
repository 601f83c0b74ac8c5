//! Default locations of the daemon's state and socket, shared by `serve` and the clients.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

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

/// Where clients look when neither `--socket` nor `VERBD_SOCKET` says: the socket `serve`
/// uses by default.
pub fn default_socket_path() -> PathBuf {
    socket_path_in(&default_state_dir())
}

/// The socket `serve` uses when neither flag nor policy says: `$XDG_RUNTIME_DIR/verbd.sock`,
/// else inside its state dir.
pub fn socket_path_in(state_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_absolute()) {
        Some(dir) => PathBuf::from(dir).join("verbd.sock"),
        None => state_dir.join("verbd.sock"),
    }
}
