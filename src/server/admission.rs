//! Admission: whether a connection may be served, decided at accept from the peer's uid
//! (`SO_PEERCRED`), before a byte of its request is read.
//!
//! Every listening socket has its own [`Pool`]: the agent socket's and the approver socket's
//! never share a place, so no agent can make an approver wait. Inside a pool every uid has its
//! own budget of connections and of parked `wait`s, so one caller flooding (slow senders,
//! hundreds of `wait`s, many parallel calls) exhausts only its own budget, and everyone else is
//! answered as if it were idle — until as many uids as it takes to fill the pool's total act
//! together.
//!
//! Invariants: a served connection holds exactly one [`Admission`] from accept until its answer
//! is written or it is dropped; counts change only under the pool's lock, an admission's `Drop`
//! is the only decrement; a `wait` gives up its connection place for a place among the parked
//! waits ([`Admission::park_for_wait`]), so waiting never holds a place a request needs. A
//! refusal names the limit it hit and the policy key that sets it.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Which socket a connection arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketKind {
    /// The agents' socket (also every socket when there is no approver socket).
    Agent,
    /// `daemon.approver_socket` (systemd: the socket named `approver`).
    Approver,
}

/// A pool's limits, with the policy keys that set them (for the refusal's reason).
#[derive(Clone, Copy, Debug)]
pub struct PoolLimits {
    pub connections: usize,
    pub connections_key: &'static str,
    pub connections_per_uid: usize,
    pub waits: usize,
    pub waits_key: &'static str,
    pub waits_per_uid: usize,
}

impl PoolLimits {
    /// The limits of `kind`'s pool under `daemon`.
    pub fn of(kind: SocketKind, daemon: &crate::policy::DaemonConfig) -> PoolLimits {
        let (connections, connections_key, waits, waits_key) = match kind {
            SocketKind::Agent => (
                daemon.max_connections,
                "daemon.max_connections",
                daemon.max_waits,
                "daemon.max_waits",
            ),
            SocketKind::Approver => (
                daemon.approver_max_connections,
                "daemon.approver_max_connections",
                daemon.approver_max_connections,
                "daemon.approver_max_connections",
            ),
        };
        PoolLimits {
            connections,
            connections_key,
            connections_per_uid: daemon.max_connections_per_uid,
            waits,
            waits_key,
            waits_per_uid: daemon.max_waits_per_uid,
        }
    }
}

/// Why a connection (or a `wait`) was not admitted: the text of its `busy` answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "uid {uid} already has {limit} connections open to this socket (daemon.max_connections_per_uid = {limit}); let some finish, then retry"
    )]
    UidConnections { uid: u32, limit: usize },
    #[error(
        "this socket has its maximum of {limit} connections open ({key} = {limit}); retry shortly"
    )]
    Connections { limit: usize, key: &'static str },
    #[error(
        "uid {uid} already has {limit} `wait` requests parked (daemon.max_waits_per_uid = {limit}); let some finish, then retry"
    )]
    UidWaits { uid: u32, limit: usize },
    #[error(
        "this socket has its maximum of {limit} `wait` requests parked ({key} = {limit}); retry shortly"
    )]
    Waits { limit: usize, key: &'static str },
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    connections: usize,
    waits: usize,
}

/// One socket's places: connections and parked waits, in all and per uid.
#[derive(Debug)]
pub struct Pool {
    kind: SocketKind,
    held: Mutex<Counts>,
}

#[derive(Default, Debug)]
struct Counts {
    total: Held,
    /// Only uids holding something (an entry is removed when it reaches zero).
    per_uid: HashMap<u32, Held>,
}

impl Pool {
    pub fn new(kind: SocketKind) -> Arc<Pool> {
        Arc::new(Pool {
            kind,
            held: Mutex::new(Counts::default()),
        })
    }

    pub fn kind(&self) -> SocketKind {
        self.kind
    }

    /// A connection place for `uid`, or the limit that refuses it.
    pub fn admit(self: &Arc<Self>, uid: u32, limits: &PoolLimits) -> Result<Admission, Refused> {
        let mut counts = self.held.lock().expect("admission lock");
        let mine = counts.per_uid.get(&uid).copied().unwrap_or_default();
        if mine.connections >= limits.connections_per_uid {
            return Err(Refused::UidConnections {
                uid,
                limit: limits.connections_per_uid,
            });
        }
        if counts.total.connections >= limits.connections {
            return Err(Refused::Connections {
                limit: limits.connections,
                key: limits.connections_key,
            });
        }
        counts.total.connections += 1;
        counts.per_uid.entry(uid).or_default().connections += 1;
        Ok(Admission {
            pool: self.clone(),
            uid,
            place: Place::Connection,
        })
    }

    /// Connections and parked waits held now, from all uids together (for `status`).
    pub fn in_use(&self) -> (usize, usize) {
        let total = self.held.lock().expect("admission lock").total;
        (total.connections, total.waits)
    }

    /// (connections, parked waits) held now by `uid`, and in all.
    #[cfg(test)]
    fn held(&self, uid: u32) -> (Held, Held) {
        let counts = self.held.lock().expect("admission lock");
        (
            counts.per_uid.get(&uid).copied().unwrap_or_default(),
            counts.total,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Connection,
    Wait,
}

/// A place in a pool, given back when dropped.
#[derive(Debug)]
pub struct Admission {
    pool: Arc<Pool>,
    uid: u32,
    place: Place,
}

impl Admission {
    /// The socket this place belongs to.
    pub fn kind(&self) -> SocketKind {
        self.pool.kind
    }

    /// Trade the connection place for a parked-wait place (a `wait` request, once read). On a
    /// refusal the connection place is kept, to write the `busy` answer.
    pub fn park_for_wait(&mut self, limits: &PoolLimits) -> Result<(), Refused> {
        if self.place == Place::Wait {
            return Ok(());
        }
        let mut counts = self.pool.held.lock().expect("admission lock");
        let mine = counts.per_uid.get(&self.uid).copied().unwrap_or_default();
        if mine.waits >= limits.waits_per_uid {
            return Err(Refused::UidWaits {
                uid: self.uid,
                limit: limits.waits_per_uid,
            });
        }
        if counts.total.waits >= limits.waits {
            return Err(Refused::Waits {
                limit: limits.waits,
                key: limits.waits_key,
            });
        }
        counts.total.connections -= 1;
        counts.total.waits += 1;
        let mine = counts.per_uid.entry(self.uid).or_default();
        mine.connections -= 1;
        mine.waits += 1;
        self.place = Place::Wait;
        Ok(())
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let Ok(mut counts) = self.pool.held.lock() else {
            return;
        };
        let counts = &mut *counts;
        let (total, mine) = match counts.per_uid.get_mut(&self.uid) {
            Some(mine) => (&mut counts.total, mine),
            None => return,
        };
        match self.place {
            Place::Connection => {
                total.connections -= 1;
                mine.connections -= 1;
            }
            Place::Wait => {
                total.waits -= 1;
                mine.waits -= 1;
            }
        }
        if *mine == Held::default() {
            counts.per_uid.remove(&self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> PoolLimits {
        PoolLimits {
            connections: 5,
            connections_key: "daemon.max_connections",
            connections_per_uid: 2,
            waits: 3,
            waits_key: "daemon.max_waits",
            waits_per_uid: 2,
        }
    }

    #[test]
    fn one_uid_is_refused_at_its_own_limit_while_another_is_admitted() {
        let pool = Pool::new(SocketKind::Agent);
        let limits = limits();
        let held: Vec<Admission> = (0..2).map(|_| pool.admit(1, &limits).unwrap()).collect();
        assert_eq!(
            pool.admit(1, &limits).unwrap_err(),
            Refused::UidConnections { uid: 1, limit: 2 }
        );
        let other = pool.admit(2, &limits).unwrap();
        drop(held);
        assert_eq!(pool.held(1).0, Held::default());
        assert_eq!(pool.held(2).1.connections, 1);
        drop(other);
        assert_eq!(pool.held(2).1, Held::default());
    }

    #[test]
    fn the_total_refuses_with_the_key_that_sets_it() {
        let pool = Pool::new(SocketKind::Approver);
        let limits = limits();
        let _held: Vec<Admission> = (0..5)
            .map(|uid| pool.admit(uid, &limits).unwrap())
            .collect();
        let refused = pool.admit(9, &limits).unwrap_err();
        assert_eq!(
            refused,
            Refused::Connections {
                limit: 5,
                key: "daemon.max_connections"
            }
        );
        assert!(refused.to_string().contains("daemon.max_connections = 5"));
    }

    #[test]
    fn a_parked_wait_frees_its_connection_place_and_has_its_own_limit() {
        let pool = Pool::new(SocketKind::Agent);
        let limits = limits();
        let mut waits = Vec::new();
        for _ in 0..2 {
            let mut admission = pool.admit(1, &limits).unwrap();
            admission.park_for_wait(&limits).unwrap();
            waits.push(admission);
        }
        // Both waits parked: uid 1 holds no connection place, so it may still connect twice.
        let (mine, _) = pool.held(1);
        assert_eq!(
            mine,
            Held {
                connections: 0,
                waits: 2
            }
        );
        let mut third = pool.admit(1, &limits).unwrap();
        let _fourth = pool.admit(1, &limits).unwrap();
        assert_eq!(
            third.park_for_wait(&limits).unwrap_err(),
            Refused::UidWaits { uid: 1, limit: 2 }
        );
        // The refused wait kept its connection place (to write `busy`), and gives it back.
        assert_eq!(pool.held(1).0.connections, 2);
        drop(third);
        assert_eq!(pool.held(1).0.connections, 1);
        // Another uid parks the last wait the pool has; then the total refuses.
        let mut other = pool.admit(2, &limits).unwrap();
        other.park_for_wait(&limits).unwrap();
        let mut last = pool.admit(3, &limits).unwrap();
        assert_eq!(
            last.park_for_wait(&limits).unwrap_err(),
            Refused::Waits {
                limit: 3,
                key: "daemon.max_waits"
            }
        );
        drop(waits);
        last.park_for_wait(&limits).unwrap();
        assert_eq!(pool.held(3).1.waits, 2);
    }
}
