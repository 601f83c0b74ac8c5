//! Pacing of `busy` answers: a uid refused at accept faster than an honest client ever is gets
//! its later `busy` answers after a pause, so reconnecting the moment it hears cannot make the
//! daemon accept and refuse at full speed.
//!
//! Why: the uid of a connection is known only after `accept`, so every refusal costs the daemon
//! an accept, a credentials lookup, a send and a close. An agent whose budget is full and whose
//! hundreds of sockets each reconnect as soon as they are answered made the daemon refuse about
//! 40,000 connections a second — CPU taken from everyone else's calls. With pacing, each of its
//! sockets is answered at most once per [`HOLD`]: the rate it can cause is bounded by the number
//! of sockets it keeps open (and pays for) instead of by how fast the daemon can answer.
//!
//! Rules: per uid, the first [`ANSWERED_AT_ONCE`] refusals in a [`WINDOW`] are answered at once
//! (a burst of parallel calls over the budget hears `busy` without delay); past them, each
//! refused connection is held — unread, registered with nothing, answered `busy` after
//! [`HOLD`] — while its uid holds less than its share of the daemon's budget of such
//! connections (a part of its descriptor limit, [`held_budget`]); beyond its share a refusal is
//! answered at once, as before pacing. A held connection is never admitted: its answer is the
//! same `busy`, later.
//!
//! The share: a uid may hold at most half of the places the other uids leave free. Alone, it
//! holds at most half of the budget; each further uid finds at least half of what the others
//! left. So no uid, however many sockets it keeps, fills the budget and so switches pacing off
//! for the others (when the budget was global, one uid with more sockets than the budget made
//! every other uid's refusals unpaced again). What a uid keeps beyond its share is answered at
//! once: that churn costs the daemon CPU bounded by the sockets that uid keeps open (its own
//! descriptor limit) and by the CPU quota of its slice, and no other uid's pacing.
//!
//! Invariants: a held connection holds exactly one [`HeldBusy`] until its answer is sent, whose
//! `Drop` is the only decrement (of the total and of its uid's count, removed at zero); the
//! total never exceeds the budget, a uid's count never exceeds its share at the time it was
//! held; per-uid windows exist only for uids refused within the last window (older ones are
//! pruned), so the map is bounded by the uids the kernel vouched for, and the per-uid counts by
//! the budget.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The refusals per uid and [`WINDOW`] answered at once.
pub const ANSWERED_AT_ONCE: u32 = 64;
/// The window [`ANSWERED_AT_ONCE`] counts in.
pub const WINDOW: Duration = Duration::from_secs(1);
/// How long a held refusal waits for its `busy` answer.
pub const HOLD: Duration = Duration::from_secs(1);
/// The most connections held at once, whatever the descriptor limit.
pub const MOST_HELD: usize = 8192;
/// Windows kept before the expired ones are pruned.
const WINDOWS_BEFORE_PRUNING: usize = 256;

/// The held-connection budget for a descriptor limit of `open_files`: an eighth of it (the rest
/// stays for the connections and parked waits of both sockets, the journal and the verbs' pipes,
/// even at the 1024 of a limit that cannot be raised), at most [`MOST_HELD`].
pub fn held_budget(open_files: u64) -> usize {
    usize::try_from(open_files / 8)
        .unwrap_or(usize::MAX)
        .min(MOST_HELD)
}

/// How one refusal is answered.
#[derive(Debug)]
pub enum Pace {
    /// Send `busy` now.
    AtOnce,
    /// Send `busy` after [`HOLD`]; the place is given back when this is dropped.
    Held(HeldBusy),
}

/// One held refusal's place in the budget.
#[derive(Debug)]
pub struct HeldBusy {
    pacer: Arc<Pacer>,
    uid: u32,
}

impl Drop for HeldBusy {
    fn drop(&mut self) {
        if let Ok(mut state) = self.pacer.state.lock() {
            state.held -= 1;
            if let Some(mine) = state.held_per_uid.get_mut(&self.uid) {
                *mine -= 1;
                if *mine == 0 {
                    state.held_per_uid.remove(&self.uid);
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    answered_at_once: u32,
}

#[derive(Debug, Default)]
struct State {
    held: usize,
    /// Only uids holding a place (an entry is removed when it reaches zero).
    held_per_uid: HashMap<u32, usize>,
    windows: HashMap<u32, Window>,
}

impl State {
    /// Whether `uid` may hold one more place of `budget`: after it, the uid holds at most half
    /// of the places the other uids leave free.
    fn within_share(&self, uid: u32, budget: usize) -> bool {
        let mine = self.held_per_uid.get(&uid).copied().unwrap_or(0);
        let others = self.held - mine;
        2 * (mine + 1) <= budget.saturating_sub(others)
    }
}

/// The daemon's pacing of `busy` answers, shared by its sockets.
#[derive(Debug)]
pub struct Pacer {
    budget: usize,
    state: Mutex<State>,
}

impl Pacer {
    /// A pacer that holds at most `budget` connections at once.
    pub fn new(budget: usize) -> Arc<Pacer> {
        Arc::new(Pacer {
            budget,
            state: Mutex::new(State::default()),
        })
    }

    /// How to answer a connection of `uid` just refused at `now`.
    pub fn pace(self: &Arc<Self>, uid: u32, now: Instant) -> Pace {
        let mut state = self.state.lock().expect("pacing lock");
        if state.windows.len() >= WINDOWS_BEFORE_PRUNING {
            state
                .windows
                .retain(|_, window| now.duration_since(window.started) < WINDOW);
        }
        let over_share = !state.within_share(uid, self.budget);
        let window = state.windows.entry(uid).or_insert(Window {
            started: now,
            answered_at_once: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                answered_at_once: 0,
            };
        }
        if window.answered_at_once < ANSWERED_AT_ONCE || over_share {
            window.answered_at_once = window.answered_at_once.saturating_add(1);
            return Pace::AtOnce;
        }
        state.held += 1;
        *state.held_per_uid.entry(uid).or_default() += 1;
        Pace::Held(HeldBusy {
            pacer: self.clone(),
            uid,
        })
    }

    /// Connections held for a paced `busy` now (for `status`).
    pub fn held(&self) -> usize {
        self.state.lock().expect("pacing lock").held
    }

    /// The most connections this pacer holds at once.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_held(pace: &Pace) -> bool {
        matches!(pace, Pace::Held(_))
    }

    #[test]
    fn a_burst_is_answered_at_once_and_the_rest_of_the_window_is_held() {
        let pacer = Pacer::new(100);
        let start = Instant::now();
        for n in 0..ANSWERED_AT_ONCE {
            assert!(!is_held(&pacer.pace(7, start)), "refusal {n} was held");
        }
        let held: Vec<Pace> = (0..10).map(|_| pacer.pace(7, start)).collect();
        assert!(held.iter().all(is_held));
        assert_eq!(pacer.held(), 10);
        // Another uid has its own window.
        assert!(!is_held(&pacer.pace(8, start)));
        // Answering gives the places back.
        drop(held);
        assert_eq!(pacer.held(), 0);
        // A new window answers at once again.
        let later = start + WINDOW;
        assert!(!is_held(&pacer.pace(7, later)));
    }

    #[test]
    fn a_uid_holds_at_most_half_of_what_the_others_leave_free() {
        let pacer = Pacer::new(8);
        let start = Instant::now();
        let past_the_burst = |uid: u32| {
            for _ in 0..ANSWERED_AT_ONCE {
                pacer.pace(uid, start);
            }
        };
        let hold_all = |uid: u32| -> Vec<Pace> {
            let mut held = Vec::new();
            loop {
                match pacer.pace(uid, start) {
                    Pace::Held(place) => held.push(Pace::Held(place)),
                    Pace::AtOnce => return held,
                }
            }
        };
        past_the_burst(7);
        // Alone, a uid holds half of the budget; past its share it is answered at once.
        let first = hold_all(7);
        assert_eq!(first.len(), 4);
        // Each further uid finds half of what the others left: the budget is never full.
        let others: Vec<Vec<Pace>> = [8, 9, 10]
            .into_iter()
            .map(|uid| {
                past_the_burst(uid);
                hold_all(uid)
            })
            .collect();
        let shares: Vec<usize> = others.iter().map(Vec::len).collect();
        assert_eq!(shares, [2, 1, 0]);
        assert_eq!(pacer.held(), 7);
        // The flooder still holds no more than its share of what is free.
        assert!(!is_held(&pacer.pace(7, start)));
        // Answering gives its places back, to it and to the others.
        drop(first);
        assert_eq!(pacer.held(), 3);
        assert!(is_held(&pacer.pace(10, start)));
        assert!(!pacer.state.lock().unwrap().held_per_uid.contains_key(&7));
    }

    #[test]
    fn expired_windows_are_pruned() {
        let pacer = Pacer::new(10);
        let start = Instant::now();
        for uid in 0..WINDOWS_BEFORE_PRUNING as u32 {
            pacer.pace(uid, start);
        }
        pacer.pace(99_999, start + WINDOW);
        assert_eq!(pacer.state.lock().unwrap().windows.len(), 1);
    }

    #[test]
    fn the_budget_is_an_eighth_of_the_descriptor_limit_within_bounds() {
        assert_eq!(held_budget(1024), 128);
        assert_eq!(held_budget(524_288), MOST_HELD);
        assert_eq!(held_budget(0), 0);
    }
}
