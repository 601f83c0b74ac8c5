//! `--socket`: the one flag every client command shares, and which socket it means when absent.
//! A leaf of the command line's types, so the commands' own modules (`local`'s hook commands)
//! and `args` can both use it without importing each other.
#![forbid(unsafe_code)]

use clap::Args;
use std::path::PathBuf;
use verbd::paths::ClientSide;

#[derive(Args, Clone)]
pub(crate) struct SocketArg {
    /// Daemon socket (default: $VERBD_SOCKET, else the socket `verbd serve` binds by default
    /// for you if it is there, else the packaged daemon's /run/verbd/verbd.sock for agents'
    /// commands, /run/verbd/approve.sock for approvers')
    #[arg(long, global = true)]
    pub(crate) socket: Option<PathBuf>,
}

impl SocketArg {
    /// The socket a command on `side` connects to.
    pub(crate) fn path(&self, side: ClientSide) -> PathBuf {
        self.socket
            .clone()
            .or_else(|| std::env::var_os("VERBD_SOCKET").map(PathBuf::from))
            .unwrap_or_else(|| verbd::paths::client_socket(side))
    }

    /// What the commands this one prints (`verbd approve …`) need to reach the same daemon:
    /// the `--socket` given here, since the default or `VERBD_SOCKET` finds it again by itself.
    pub(crate) fn for_next_command(&self) -> Option<&std::path::Path> {
        self.socket.as_deref()
    }
}
