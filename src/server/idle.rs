//! When the daemon is idle: after a quiet spell it hands back the pages its calls touched.
//!
//! A call maps in megabytes of the binary's code and read-only data (the request's decoding,
//! policy evaluation, the journal's JSON and MAC, the runtime), and they stay resident long
//! after the last call. [`IdleWatch`] tells the daemon when it has been quiet for
//! [`IDLE_RELEASE_AFTER`]; it then releases those pages as it does after its start
//! (`sys::memory::release_clean_pages`): the page cache keeps them, and the next call maps
//! what it needs again (minor faults, no I/O while cached).
//!
//! Invariants:
//! - quiet means no connection accepted and no run going for the whole spell: a daemon that
//!   keeps serving never releases, so calls in a stream never pay the faults;
//! - one release per quiet spell: the next one needs a connection or a run in between;
//! - the release changes what is resident, never what the daemon computes or answers.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// How long the daemon must have accepted no connection and run nothing before it hands back
/// the pages its calls touched.
pub const IDLE_RELEASE_AFTER: Duration = Duration::from_secs(5);

/// How often the daemon looks whether it is idle.
pub const IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Watches the daemon's activity between checks and says when a quiet spell is long enough.
#[derive(Debug)]
pub struct IdleWatch {
    /// The count of accepted connections at the last check.
    accepted: u64,
    /// When the daemon was last seen active.
    quiet_since: Instant,
    /// Whether this quiet spell's release was already made.
    released: bool,
}

impl IdleWatch {
    /// A watch that counts the daemon as active at `now`, with `accepted` connections so far.
    pub fn new(accepted: u64, now: Instant) -> IdleWatch {
        IdleWatch {
            accepted,
            quiet_since: now,
            released: false,
        }
    }

    /// One check at `now`: `accepted` is the count of connections accepted so far, `running`
    /// whether a run is going. True once per quiet spell, when it has lasted
    /// [`IDLE_RELEASE_AFTER`].
    pub fn release_due(&mut self, accepted: u64, running: bool, now: Instant) -> bool {
        if accepted != self.accepted || running {
            self.accepted = accepted;
            self.quiet_since = now;
            self.released = false;
            return false;
        }
        if self.released || now.duration_since(self.quiet_since) < IDLE_RELEASE_AFTER {
            return false;
        }
        self.released = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_quiet_spell_releases_once_when_it_reaches_its_length() {
        let start = Instant::now();
        let mut watch = IdleWatch::new(7, start);
        assert!(!watch.release_due(7, false, start + IDLE_RELEASE_AFTER - SECOND));
        assert!(watch.release_due(7, false, start + IDLE_RELEASE_AFTER));
        for later in 1..10 {
            assert!(
                !watch.release_due(7, false, start + IDLE_RELEASE_AFTER + later * SECOND),
                "released twice in one quiet spell"
            );
        }
    }

    #[test]
    fn a_connection_or_a_run_starts_the_spell_again() {
        let start = Instant::now();
        let mut watch = IdleWatch::new(0, start);
        // A connection just before the spell would have ended.
        let connected = start + IDLE_RELEASE_AFTER - SECOND;
        assert!(!watch.release_due(1, false, connected));
        assert!(!watch.release_due(1, false, start + IDLE_RELEASE_AFTER));
        assert!(!watch.release_due(1, false, connected + IDLE_RELEASE_AFTER - SECOND));
        assert!(watch.release_due(1, false, connected + IDLE_RELEASE_AFTER));
        // A long run with no new connection: never idle while it runs, idle after it.
        let run_ends = connected + 60 * SECOND;
        let mut at = connected + IDLE_RELEASE_AFTER + SECOND;
        while at < run_ends {
            assert!(!watch.release_due(1, true, at), "released during a run");
            at += SECOND;
        }
        assert!(!watch.release_due(1, false, run_ends));
        assert!(watch.release_due(1, false, run_ends + IDLE_RELEASE_AFTER));
    }

    #[test]
    fn a_daemon_that_keeps_serving_never_releases() {
        let start = Instant::now();
        let mut watch = IdleWatch::new(0, start);
        // One connection every four seconds, for an hour.
        for tick in 1..3600u32 {
            let accepted = u64::from(tick / 4);
            assert!(
                !watch.release_due(accepted, false, start + tick * SECOND),
                "released at {tick} s while a call came every 4 s"
            );
        }
    }
}
