//! The environment `verbd exec` hands to the confined program: the caller's, minus the variables
//! that point at the user's own services (agents, buses, terminal multiplexers, displays,
//! container engines), unless the profile's `keep_env` keeps them. Reachability is decided by the
//! connect broker (module `unix_broker`) whether or not a variable is kept; dropping them keeps a
//! program from even trying, and keeps their values (socket paths, display cookies' locations)
//! out of the sandbox.
//!
//! Invariant: `VERBD_SOCKET` is always set, to the daemon socket the broker allows, so
//! `verbd call` and `verbd mcp` inside the sandbox reach the daemon with no setup.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Variables dropped by default, with what they point at.
pub const DROPPED: &[&str] = &[
    // Agents holding the user's keys.
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "GNOME_KEYRING_CONTROL",
    // Message buses (D-Bus can start unconfined processes).
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    // Terminal multiplexers and editors with a control socket (they type into other shells).
    "TMUX",
    "TMUX_PANE",
    "STY",
    "KITTY_LISTEN_ON",
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
    // Displays (keystrokes into other windows).
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "WAYLAND_SOCKET",
    "XAUTHORITY",
    "SWAYSOCK",
    "I3SOCK",
    "HYPRLAND_INSTANCE_SIGNATURE",
    "PULSE_SERVER",
    // Container engines (root on the host for their group).
    "DOCKER_HOST",
    "CONTAINER_HOST",
    // The per-user runtime directory, where the user's service sockets live.
    "XDG_RUNTIME_DIR",
];

/// The confined program's environment from `current`, keeping the names in `keep_env`, with
/// `VERBD_SOCKET` set to `verbd_socket`. Returns it and the names dropped.
pub fn filter(
    current: impl IntoIterator<Item = (OsString, OsString)>,
    keep_env: &[String],
    verbd_socket: &Path,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (name, value) in current {
        if name == "VERBD_SOCKET" {
            continue;
        }
        let drop = DROPPED.iter().any(|d| OsStr::new(d) == name)
            && !keep_env.iter().any(|k| OsStr::new(k) == name);
        if drop {
            dropped.push(name.to_string_lossy().into_owned());
        } else {
            kept.push((name, value));
        }
    }
    kept.push(("VERBD_SOCKET".into(), verbd_socket.as_os_str().to_owned()));
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_variables_go_unless_kept_and_verbd_socket_is_set() {
        let current = [
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("TMUX", "/tmp/tmux-1/default,1,0"),
            ("HOME", "/home/u"),
            ("VERBD_SOCKET", "/elsewhere"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let (env, dropped) = filter(current, &["TMUX".into()], Path::new("/run/v.sock"));
        let names: Vec<_> = env.iter().map(|(n, _)| n.to_str().unwrap()).collect();
        assert_eq!(names, ["TMUX", "HOME", "VERBD_SOCKET"]);
        assert_eq!(env[2].1, "/run/v.sock");
        assert_eq!(dropped, ["SSH_AUTH_SOCK"]);
    }
}
