//! Refusals, and command mappings, are rate-bounded per caller, never lost: within each window
//! of [`REFUSAL_WINDOW`] a caller's first [`FULL_RECORDS_PER_WINDOW`] refusals of one
//! [`RefusalClass`] are journaled one by one; the rest of that window are answered the same way
//! but only counted, and one `refusals_coalesced` record with the count and the times of the
//! first and the last is journaled when the window ends (a periodic flush, the caller's next
//! refusal of that class after the window, or the daemon's stop). So one hostile caller grows
//! the journal by a bounded amount per window whatever it sends, and the audit trail still says
//! how many times it was refused. `command` requests that map onto a verb are bounded the same
//! way, per caller and [`CommandAction`] (`rewrite`, `advise`), into `commands_coalesced`.
//!
//! Invariants: a refusal changes nothing, so answering one before its count is durable never
//! acts on anything unrecorded — nor does a mapping, which only tells the agent what to run
//! (the call it runs is journaled as every call is); every counted refusal or mapping reaches
//! the journal in a coalesced record (a crash loses at most the counts of the open windows,
//! and `start` says nothing about them); what is held per caller is a counter and one caller
//! record, never the request.
#![forbid(unsafe_code)]

use super::Daemon;
use crate::events::{CallerRecord, CommandAction, Event, RefusalClass};
use crate::journal::{JournalError, format_rfc3339};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Length of a caller's refusal window.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(10);
/// Refusals of one class (or mappings of one decision) a caller gets journaled one by one per
/// window.
pub const FULL_RECORDS_PER_WINDOW: u32 = 20;

/// What a window counts, and the record that carries its count when it ends.
pub(super) trait Coalesced: Copy + Eq + Hash {
    /// The coalesced record of `count` answers held from `first` to `last`, `caller` the last.
    fn record(self, caller: CallerRecord, count: u64, first: String, last: String) -> Event;
}

impl Coalesced for RefusalClass {
    fn record(self, caller: CallerRecord, count: u64, first: String, last: String) -> Event {
        Event::RefusalsCoalesced {
            caller,
            class: self,
            count,
            first,
            last,
            window_seconds: REFUSAL_WINDOW.as_secs(),
        }
    }
}

impl Coalesced for CommandAction {
    fn record(self, caller: CallerRecord, count: u64, first: String, last: String) -> Event {
        Event::CommandsCoalesced {
            caller,
            decision: self,
            count,
            first,
            last,
            window_seconds: REFUSAL_WINDOW.as_secs(),
        }
    }
}

/// One caller's window for one class.
struct Window {
    opened: Instant,
    journaled: u32,
    held: u64,
    first_held: SystemTime,
    last_held: SystemTime,
    /// The caller of the last refusal held (its pid changes from call to call).
    caller: CallerRecord,
}

impl Window {
    fn coalesced<C: Coalesced>(&self, class: C) -> Option<Event> {
        (self.held > 0).then(|| {
            class.record(
                self.caller.clone(),
                self.held,
                format_rfc3339(self.first_held),
                format_rfc3339(self.last_held),
            )
        })
    }
}

/// What to do with one refusal (or mapping).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admission {
    /// Journal it in full.
    Journal,
    /// Count it; its window's coalesced record carries it.
    Counted,
}

/// The open windows, per (uid, class).
pub(super) struct Windows<C> {
    windows: Mutex<HashMap<(u32, C), Window>>,
}

impl<C> Default for Windows<C> {
    fn default() -> Windows<C> {
        Windows {
            windows: Mutex::new(HashMap::new()),
        }
    }
}

impl<C: Coalesced> Windows<C> {
    /// Admit one answer of `class` to `caller` at `now`. Also returns the coalesced record of
    /// the caller's previous window of this class when it ended with answers counted.
    pub(super) fn admit(
        &self,
        caller: &CallerRecord,
        class: C,
        now: Instant,
        at: SystemTime,
    ) -> (Admission, Option<Event>) {
        let mut windows = self.windows.lock().expect("refusal windows lock");
        let key = (caller.uid, class);
        let mut ended = None;
        if let Some(window) = windows.get(&key)
            && now.duration_since(window.opened) >= REFUSAL_WINDOW
        {
            ended = window.coalesced(class);
            windows.remove(&key);
        }
        let window = windows.entry(key).or_insert_with(|| Window {
            opened: now,
            journaled: 0,
            held: 0,
            first_held: at,
            last_held: at,
            caller: caller.clone(),
        });
        let admission = if window.journaled < FULL_RECORDS_PER_WINDOW {
            window.journaled += 1;
            Admission::Journal
        } else {
            if window.held == 0 {
                window.first_held = at;
            }
            window.held += 1;
            window.last_held = at;
            window.caller = caller.clone();
            Admission::Counted
        };
        (admission, ended)
    }

    /// Close the windows that ended by `now` (every window when `all`): their coalesced
    /// records, oldest window first.
    pub(super) fn close(&self, now: Instant, all: bool) -> Vec<Event> {
        let mut windows = self.windows.lock().expect("refusal windows lock");
        let done: Vec<(u32, C)> = windows
            .iter()
            .filter(|(_, window)| all || now.duration_since(window.opened) >= REFUSAL_WINDOW)
            .map(|(key, _)| *key)
            .collect();
        let mut ended: Vec<(C, Window)> = done
            .into_iter()
            .filter_map(|key| windows.remove(&key).map(|window| (key.1, window)))
            .collect();
        ended.sort_by_key(|(_, window)| window.opened);
        ended
            .into_iter()
            .filter_map(|(class, window)| window.coalesced(class))
            .collect()
    }

    /// Answers counted in open windows, not journaled yet.
    pub(super) fn held(&self) -> u64 {
        let windows = self.windows.lock().expect("refusal windows lock");
        windows.values().map(|window| window.held).sum()
    }
}

impl Daemon {
    /// Journal `event`, a refusal of `class` by `caller`, unless the caller already had its
    /// share of full records in this window: then it is only counted. Either way the caller
    /// gets its answer, and `status` counts it under `rule`; an error means a record could not
    /// be written.
    pub(super) async fn record_refusal(
        &self,
        caller: &CallerRecord,
        class: RefusalClass,
        rule: &'static str,
        event: Event,
    ) -> Result<(), JournalError> {
        self.counted.refused(rule);
        let (admission, ended) =
            self.refusals
                .admit(caller, class, Instant::now(), SystemTime::now());
        if let Some(ended) = ended {
            self.record(ended).await?;
        }
        match admission {
            // A refused shell command is advice like a mapping (the agent is told which verb
            // to call instead), so it is answered once written, as `record_mapping` is.
            Admission::Journal if matches!(event, Event::CommandMapped { .. }) => {
                self.ledger.record_written(event).await.map(|_| ())
            }
            Admission::Journal => self.record(event).await.map(|_| ()),
            Admission::Counted => Ok(()),
        }
    }

    /// Journal `event`, a `command` request of `caller` mapped onto a verb (`action` rewrite or
    /// advise), unless the caller already had its share of full records in this window: then
    /// it is only counted. Returns once the record is written, before its fdatasync
    /// (`Ledger::record_written`: a mapping is advice, acted on by nothing). An error means a
    /// record could not be written.
    pub(super) async fn record_mapping(
        &self,
        caller: &CallerRecord,
        action: CommandAction,
        event: Event,
    ) -> Result<(), JournalError> {
        let (admission, ended) =
            self.mappings
                .admit(caller, action, Instant::now(), SystemTime::now());
        if let Some(ended) = ended {
            self.ledger.record_written(ended).await?;
        }
        match admission {
            Admission::Journal => self.ledger.record_written(event).await.map(|_| ()),
            Admission::Counted => Ok(()),
        }
    }

    /// Journal the coalesced records of the windows that ended (every window at `stopping`),
    /// refusals' and mappings'. A record that cannot be written is logged and its window is
    /// gone: what it counted changed nothing, and the journal failure denies every call anyway.
    pub async fn flush_coalesced(&self, stopping: bool) {
        let now = Instant::now();
        let ended = self.refusals.close(now, stopping);
        for event in ended.into_iter().chain(self.mappings.close(now, stopping)) {
            if let Err(error) = self.record(event).await {
                tracing::error!(%error, "coalesced refusals or mappings could not be journaled");
            }
        }
    }

    /// Refusals counted and not journaled yet (for `status`).
    pub fn refusals_held(&self) -> u64 {
        self.refusals.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, pid: i32) -> CallerRecord {
        CallerRecord {
            uid,
            gid: uid,
            pid,
            user: None,
            roles: Vec::new(),
        }
    }

    #[test]
    fn a_caller_gets_its_share_per_window_and_the_rest_are_counted_not_lost() {
        let windows = Windows::<RefusalClass>::default();
        let start = Instant::now();
        let at = SystemTime::now();
        let class = RefusalClass::Denied;
        let mut journaled = 0;
        for n in 0..(FULL_RECORDS_PER_WINDOW + 35) {
            let (admission, ended) = windows.admit(&caller(7, n as i32), class, start, at);
            assert!(ended.is_none());
            journaled += u32::from(admission == Admission::Journal);
        }
        assert_eq!(journaled, FULL_RECORDS_PER_WINDOW);
        // Another class and another caller have their own windows.
        let other = windows.admit(&caller(7, 1), RefusalClass::CheckDenied, start, at);
        assert_eq!(other.0, Admission::Journal);
        assert_eq!(
            windows.admit(&caller(8, 1), class, start, at).0,
            Admission::Journal
        );
        assert_eq!(windows.held(), 35);
        // Nothing ended yet.
        assert!(
            windows
                .close(start + Duration::from_secs(1), false)
                .is_empty()
        );
        // The next refusal after the window ends brings the count along.
        let later = start + REFUSAL_WINDOW;
        let (admission, ended) = windows.admit(&caller(7, 99), class, later, at);
        assert_eq!(admission, Admission::Journal);
        match ended {
            Some(Event::RefusalsCoalesced {
                caller,
                class: RefusalClass::Denied,
                count: 35,
                ..
            }) => assert_eq!(caller.pid, (FULL_RECORDS_PER_WINDOW + 34) as i32),
            other => panic!("{other:?}"),
        }
        // A stop closes every window; only those with counted refusals make a record.
        for _ in 0..FULL_RECORDS_PER_WINDOW + 2 {
            windows.admit(&caller(9, 1), class, later, at);
        }
        let closed = windows.close(later, true);
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert!(matches!(
            closed[0],
            Event::RefusalsCoalesced { count: 2, .. }
        ));
        assert_eq!(windows.held(), 0);
    }
}
