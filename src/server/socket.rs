//! Creating the listening socket safely.
//!
//! Invariants: the socket never exists with wider permissions than configured (it is bound under
//! a restrictive umask, then given its exact mode and group); an existing path is replaced only
//! when it is a socket nobody answers on (stale); a live daemon's socket or a non-socket file is
//! never removed.
#![forbid(unsafe_code)]

use nix::sys::stat::{Mode, umask};
use nix::unistd::{Gid, Group, chown};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another verbd is already serving on {0}; stop it first or choose another --socket")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to remove it (choose another --socket)")]
    NotASocket(PathBuf),
    #[error("socket group {0:?} does not exist (create it, or change daemon.socket_group)")]
    UnknownGroup(String),
    #[error("cannot create the socket directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot bind {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot set mode/group on {path}: {source}")]
    Permissions {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Bind a Unix stream socket at `path` with `mode` and optional `group`.
pub fn bind(path: &Path, mode: u32, group: Option<&str>) -> Result<UnixListener, SocketError> {
    let gid = match group {
        None => None,
        Some(name) => match Group::from_name(name) {
            Ok(Some(g)) => Some(g.gid),
            _ => return Err(SocketError::UnknownGroup(name.to_string())),
        },
    };
    if let Some(parent) = path.parent() {
        if !parent.exists() {
            std::fs::create_dir_all(parent).map_err(|source| SocketError::Dir {
                path: parent.to_path_buf(),
                source,
            })?;
            let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|source| SocketError::Bind {
                path: path.to_path_buf(),
                source,
            })?;
        }
        Ok(_) => return Err(SocketError::NotASocket(path.to_path_buf())),
        Err(_) => {}
    }
    let previous = umask(Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    umask(previous);
    let listener = bound.map_err(|source| SocketError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    set_access(path, mode, gid)?;
    Ok(listener)
}

fn set_access(path: &Path, mode: u32, gid: Option<Gid>) -> Result<(), SocketError> {
    let err = |source: std::io::Error| SocketError::Permissions {
        path: path.to_path_buf(),
        source,
    };
    if let Some(gid) = gid {
        chown(path, None, Some(gid)).map_err(|e| err(e.into()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)
}
