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

/// A socket bound to its path but not yet listening: clients get "connection refused" until
/// [`BoundSocket::listen`] (called only after the self-test passed).
pub struct BoundSocket {
    fd: std::os::fd::OwnedFd,
    pub path: PathBuf,
}

impl BoundSocket {
    /// Start accepting connections.
    pub fn listen(self) -> Result<UnixListener, SocketError> {
        let err = |e: nix::Error| SocketError::Bind {
            path: self.path.clone(),
            source: e.into(),
        };
        let backlog = nix::sys::socket::Backlog::new(512).map_err(err)?;
        nix::sys::socket::listen(&self.fd, backlog).map_err(err)?;
        let listener = UnixListener::from(self.fd);
        listener
            .set_nonblocking(true)
            .map_err(|source| SocketError::Bind {
                path: self.path.clone(),
                source,
            })?;
        Ok(listener)
    }
}

/// Bind a Unix stream socket at `path` with `mode` and optional `group`, without listening.
pub fn bind(path: &Path, mode: u32, group: Option<&str>) -> Result<BoundSocket, SocketError> {
    let gid = match group {
        None => None,
        Some(name) => match Group::from_name(name) {
            Ok(Some(g)) => Some(g.gid),
            _ => return Err(SocketError::UnknownGroup(name.to_string())),
        },
    };
    if let Some(parent) = path.parent()
        && !parent.exists()
    {
        std::fs::create_dir_all(parent).map_err(|source| SocketError::Dir {
            path: parent.to_path_buf(),
            source,
        })?;
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
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
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, socket};
    let bind_err = |e: nix::Error| SocketError::Bind {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(bind_err)?;
    let addr = UnixAddr::new(path).map_err(bind_err)?;
    let previous = umask(Mode::from_bits_truncate(0o177));
    let bound = nix::sys::socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr);
    umask(previous);
    bound.map_err(bind_err)?;
    set_access(path, mode, gid)?;
    Ok(BoundSocket {
        fd,
        path: path.to_path_buf(),
    })
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
