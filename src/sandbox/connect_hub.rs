//! The connect hub: one long-lived thread that watches every daemon child's broker channel and
//! listener, and starts a serving thread (module `unix_broker`) only for a child that actually
//! makes a brokered call.
//!
//! Why: every daemon child installs the connect filter and sends its listener before `execve`,
//! so a broker per child meant two new threads per verb call — a receiver and a serving thread
//! — even for the many verbs (`echo`, `id`, `journalctl`) that never connect. Thread creation
//! and teardown were a measurable part of a call's round trip (docs/PERFORMANCE.md). The hub
//! polls all channels and listeners at once: a listener that hangs up without a notification
//! (the child and its descendants ended without a `connect`) is closed here and no thread ever
//! starts for it; a listener with a pending notification is handed, whole, to a serving thread
//! of its own that serves it exactly as before (same policy, same run-as identity, same
//! reporting).
//!
//! Invariants:
//! - the hub never answers a notification: it only watches for one, so every decision is still
//!   made by `unix_broker::serve` on a thread of that child's own, and one child's slow connect
//!   never delays another's;
//! - the hub never blocks on a child: it reads a channel only when `poll` says a message (or
//!   its end) is there, and a listener is only polled;
//! - fail closed: a registration the hub cannot take (its thread is gone) fails the spawn; if
//!   the hub's thread ended, every channel and listener it held is closed with it, and a
//!   closed listener makes the kernel answer the child's `connect` with `ENOSYS`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use super::notify::{Reporter, ThreadIdentity};
use super::unix_broker::{ConnectPolicy, receive_listener, start_serving};

/// How one child's calls are brokered, once it makes one.
#[derive(Clone)]
pub(super) struct Brokering {
    pub policy: Arc<ConnectPolicy>,
    pub identity: Option<ThreadIdentity>,
    pub reporter: Reporter,
}

/// What the hub watches.
enum Watched {
    /// A broker channel's daemon end: listeners arrive on it until every child end is closed.
    Channel(OwnedFd),
    /// A child's listener, not yet served: no notification so far.
    Listener(OwnedFd),
}

struct Entry {
    watched: Watched,
    brokering: Arc<Brokering>,
}

/// The daemon's side of the hub: where registrations go, and the datagram that wakes its thread.
struct Hub {
    registrations: Mutex<Sender<Entry>>,
    wake: UnixDatagram,
}

static HUB: OnceLock<Result<Hub, String>> = OnceLock::new();

/// Hands the daemon end of a child's broker channel to the hub (started at the first call).
/// Every listener that arrives on it is watched, and served on a thread of its own from its
/// first notification on.
pub(super) fn watch(channel: OwnedFd, brokering: Brokering) -> io::Result<()> {
    let hub = HUB
        .get_or_init(|| Hub::start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(format!("the connect hub could not start: {e}")))?;
    let entry = Entry {
        watched: Watched::Channel(channel),
        brokering: Arc::new(brokering),
    };
    hub.registrations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(entry)
        .map_err(|_| io::Error::other("the connect hub's thread ended"))?;
    match hub.wake.send(&[1]) {
        Ok(_) => Ok(()),
        // The hub has not read the earlier wake-ups yet: it will see this entry with them.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(io::Error::other(format!(
            "the connect hub's thread ended: {e}"
        ))),
    }
}

impl Hub {
    fn start() -> io::Result<Hub> {
        let (wake, woken) = UnixDatagram::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let (registrations, arrivals) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("verbd-connect-hub".into())
            .spawn(move || run(woken, arrivals))?;
        Ok(Hub {
            registrations: Mutex::new(registrations),
            wake,
        })
    }
}

/// The hub's thread: polls the wake-up socket, every channel and every unserved listener.
fn run(woken: UnixDatagram, arrivals: Receiver<Entry>) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut polled: Vec<libc::pollfd> = Vec::new();
    loop {
        polled.clear();
        polled.push(libc::pollfd {
            fd: woken.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        polled.extend(entries.iter().map(|entry| libc::pollfd {
            fd: match &entry.watched {
                Watched::Channel(fd) | Watched::Listener(fd) => fd.as_raw_fd(),
            },
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `polled` is a valid array of `polled.len()` pollfds, alive for the call.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Ending closes every channel and listener held: their children's connects fail.
            return;
        }
        if polled[0].revents != 0 {
            let mut drained = [0u8; 64];
            while woken.recv(&mut drained).is_ok_and(|n| n > 0) {}
        }
        // Walk backwards so removing an entry leaves the indices still to visit in place.
        let mut arrived = Vec::new();
        for index in (0..entries.len()).rev() {
            let revents = polled[index + 1].revents;
            if revents == 0 {
                continue;
            }
            match &entries[index].watched {
                Watched::Channel(channel) => match receive_listener(channel) {
                    Ok(Some(listener)) => arrived.push(Entry {
                        watched: Watched::Listener(listener),
                        brokering: Arc::clone(&entries[index].brokering),
                    }),
                    // Every child end is closed (or the channel failed): no more listeners.
                    Ok(None) | Err(_) => drop(entries.swap_remove(index)),
                },
                Watched::Listener(_) => {
                    let entry = entries.swap_remove(index);
                    if revents & libc::POLLIN != 0 {
                        let Watched::Listener(listener) = entry.watched else {
                            unreachable!("matched as a listener above")
                        };
                        let brokering = &entry.brokering;
                        start_serving(
                            listener,
                            Arc::clone(&brokering.policy),
                            brokering.identity,
                            brokering.reporter,
                            None,
                        );
                    }
                    // Otherwise a hang-up: every process under the filter ended without a
                    // brokered call, and dropping the entry closes the listener.
                }
            }
        }
        entries.append(&mut arrived);
        entries.extend(arrivals.try_iter());
    }
}
