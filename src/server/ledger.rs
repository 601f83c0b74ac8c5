//! The daemon's single path for state changes: journal first, then apply.
//!
//! [`Ledger::record`] appends an event to the journal (fsync'd), then applies the very same event
//! to the proposal book with `Book::apply` — the function replay uses at start — under the
//! journal's lock, so the book sees events in journal order. [`Ledger::record_written`] is for
//! advice alone (command mappings, which the book ignores): it returns once the record is
//! written, and its fdatasync follows at once. Nothing else changes the book. A
//! change wakes everyone waiting in [`Ledger::changed`] (`wait` requests), so nobody polls.
//!
//! Beside the book the ledger keeps what is deliberately *not* journaled state:
//! - reservations: a decision on a proposal (approve, deny, expire, resolve) is reserved by
//!   [`Ledger::decide`] while its record is written, so two decisions never race for one
//!   proposal, and proposal ids are reserved before their record so two proposals never share
//!   one;
//! - outputs: the scrubbed output of proposal runs and keyed runs, for `result`/`wait` and
//!   idempotent retries (the journal holds only sizes and hashes; a restart loses them), at
//!   most [`MAX_KEPT_OUTPUTS`] and for at most [`OUTPUT_RETENTION`].
//!
//! Every few MiB of records (`Journal::snapshot_due`) the journal gets a snapshot of the book,
//! written under the journal lock right after a group is applied (`GroupCommit::with_snapshots`),
//! so a restart replays from it instead of from the first record.
#![forbid(unsafe_code)]

use crate::approvals::{Book, Step, Unfit, unix_ms};
use crate::events::Event;
use crate::journal::{Appended, GroupCommit, Journal, JournalError};
use crate::proposal::State;
use crate::protocol::RunResult;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Most run outputs kept in memory for `result` and retries; the oldest go first.
pub const MAX_KEPT_OUTPUTS: usize = 256;

/// Longest a run's output is kept (as long as its proposal or idempotency key is).
pub const OUTPUT_RETENTION: Duration = crate::approvals::PROPOSAL_RETENTION;

/// The book plus the in-memory reservations and outputs.
struct Live {
    book: Book,
    /// Proposals with a decision being journaled right now.
    reserved: BTreeSet<u64>,
    /// Idempotency keys (uid, key) of calls being recorded right now.
    reserved_keys: BTreeSet<(u32, String)>,
    /// The highest proposal id handed out (journaled or not).
    last_id: u64,
    /// exec seq → when the run's output was kept, and the output.
    outputs: BTreeMap<u64, (Instant, RunResult)>,
}

/// Journal + book, changed only together.
pub struct Ledger {
    /// Concurrent records share one fdatasync; the book applies each once it is durable.
    journal: Arc<GroupCommit<Event>>,
    live: Arc<Mutex<Live>>,
    changes: watch::Sender<u64>,
}

/// Why a decision on a proposal was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum Undecided {
    #[error("no proposal {0}")]
    NotFound(u64),
    /// Another decision on it is being recorded right now.
    #[error("another decision on proposal {0} is being recorded; ask again shortly")]
    Busy(u64),
    /// The transition table refuses it as the proposal stands.
    #[error("{unfit}")]
    Unfit { id: u64, unfit: Unfit, state: State },
    /// It approves a proposal past its expiry.
    #[error("proposal {0} expired; nothing ran")]
    Expired(u64),
    /// It expires a proposal whose time has not come (or that is being decided).
    #[error("proposal {0} is not past its expiry")]
    NotDue(u64),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Releases a decision's reservation when the decision ends, however it ends.
struct Reservation<'a> {
    live: &'a Mutex<Live>,
    id: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.live
            .lock()
            .expect("ledger lock")
            .reserved
            .remove(&self.id);
    }
}

impl Ledger {
    pub fn new(journal: Journal, book: Book) -> Ledger {
        let last_id = book.next_id().saturating_sub(1);
        let live = Arc::new(Mutex::new(Live {
            book,
            reserved: BTreeSet::new(),
            reserved_keys: BTreeSet::new(),
            last_id,
            outputs: BTreeMap::new(),
        }));
        let book = live.clone();
        let apply = move |event: &Event, appended: &Appended| {
            let time =
                crate::journal::parse_rfc3339(&appended.time).unwrap_or(SystemTime::UNIX_EPOCH);
            let mut live = book.lock().expect("ledger lock");
            if let Err(conflict) = live.book.apply(appended.seq, time, event) {
                tracing::error!(%conflict, "a journaled event did not fit the proposal book");
            }
        };
        let book = live.clone();
        let state = move || book.lock().expect("ledger lock").book.snapshot_state();
        Ledger {
            journal: Arc::new(GroupCommit::new(journal, apply).with_snapshots(state)),
            live,
            changes: watch::channel(0).0,
        }
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().expect("ledger lock")
    }

    /// Journal `event` (fsync'd, off the async threads, in a group with concurrent records),
    /// then apply it to the book; returns once both are done.
    pub async fn record(&self, event: Event) -> Result<Appended, JournalError> {
        let journal = self.journal.clone();
        let appended = tokio::task::spawn_blocking(move || journal.append(event))
            .await
            .expect("journal task panicked")?;
        self.changes.send_modify(|n| *n += 1);
        Ok(appended)
    }

    /// Journal `event`, a record nothing acts on and the book does not apply (a command mapping
    /// or their count), and return as soon as its line is written, before its fdatasync
    /// (`GroupCommit::append_written`): a kill of the daemon does not lose it; a kernel crash or
    /// power cut within that fdatasync, or its failure (logged), can. An error means it was not
    /// written.
    pub async fn record_written(&self, event: Event) -> Result<Appended, JournalError> {
        debug_assert!(
            matches!(
                event,
                Event::CommandMapped { .. } | Event::CommandsCoalesced { .. }
            ),
            "only advice is answered before it is durable: {event:?}"
        );
        let journal = self.journal.clone();
        let (tell, written) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            journal.append_written(event, move |result| {
                let _ = tell.send(result);
            })
        });
        written
            .await
            .expect("the journal tells every appender of its record (journal task panicked)")
    }

    /// Read the book (short critical section; never held across an await).
    pub fn read<R>(&self, f: impl FnOnce(&Book) -> R) -> R {
        f(&self.live().book)
    }

    /// Close the journal's epoch: now (`stopping`), or when it is due by time. Seal records are
    /// journal-internal (`journal_seal`): they change nothing in the book.
    pub async fn seal_journal(&self, stopping: bool) -> Result<(), JournalError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || {
            let mut journal = journal.lock().expect("journal lock");
            if stopping {
                journal.seal_now("stop")
            } else {
                journal.seal_if_due().map(|_| ())
            }
        })
        .await
        .expect("journal task panicked")
    }

    /// A copy of the book as it is now (tests compare it with a replay of the journal).
    pub fn snapshot(&self) -> Book {
        self.live().book.clone()
    }

    /// A receiver that wakes on every change of the book.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Hand out the next proposal id (its record may still fail; the id is then skipped).
    pub fn reserve_id(&self) -> u64 {
        let mut live = self.live();
        live.last_id = live.last_id.max(live.book.next_id().saturating_sub(1)) + 1;
        live.last_id
    }

    /// Decide on a proposal: the only way a request handler changes one. Under the ledger's lock
    /// it refuses a decision another is recording ([`Undecided::Busy`]), one the transition table
    /// refuses as the proposal stands (`Book::check`), an approval past the expiry and an expiry
    /// before it; then it reserves the proposal, journals `event`, which applies it, and releases
    /// the reservation. Nobody hears of a decision that is not durable.
    pub async fn decide(&self, event: Event, now: SystemTime) -> Result<Appended, Undecided> {
        let (id, step) = self
            .read(|b| b.step_of(&event))
            .expect("a decision names the proposal it moves");
        let _reservation = {
            let mut live = self.live();
            let proposal = live.book.get(id).ok_or(Undecided::NotFound(id))?;
            let due = proposal.expires_ms <= unix_ms(now);
            let state = proposal.state;
            if live.reserved.contains(&id) {
                return Err(Undecided::Busy(id));
            }
            live.book
                .check(&event)
                .map_err(|unfit| Undecided::Unfit { id, unfit, state })?;
            match step {
                Step::Approve | Step::Endorse if due => return Err(Undecided::Expired(id)),
                Step::Expire if !due => return Err(Undecided::NotDue(id)),
                _ => {}
            }
            live.reserved.insert(id);
            Reservation {
                live: &self.live,
                id,
            }
        };
        Ok(self.record(event).await?)
    }

    /// Reserve an idempotency key the book does not know yet, until the call's first record
    /// (its `exec` or `proposal_created`) is written; `false` when the book knows it or another
    /// call holds it. Release with [`Ledger::release_key`].
    pub fn reserve_key(&self, uid: u32, key: &str, now: SystemTime) -> bool {
        let mut live = self.live();
        if live.book.key(uid, key, now).is_some() {
            return false;
        }
        live.reserved_keys.insert((uid, key.to_string()))
    }

    pub fn release_key(&self, uid: u32, key: &str) {
        self.live().reserved_keys.remove(&(uid, key.to_string()));
    }

    /// Pending proposals past their expiry and not being decided right now.
    pub fn overdue(&self, now: SystemTime) -> Vec<u64> {
        let live = self.live();
        let mut ids = live.book.overdue(now);
        ids.retain(|id| !live.reserved.contains(id));
        ids
    }

    /// Keep a run's output (for `result`, `wait` and retries).
    pub fn keep_output(&self, exec_seq: u64, result: RunResult) {
        let mut live = self.live();
        let now = Instant::now();
        live.outputs
            .retain(|_, (kept, _)| now.duration_since(*kept) <= OUTPUT_RETENTION);
        live.outputs.insert(exec_seq, (now, result));
        while live.outputs.len() > MAX_KEPT_OUTPUTS {
            live.outputs.pop_first();
        }
    }

    /// The kept output of the run with this exec seq (within [`OUTPUT_RETENTION`]).
    pub fn output(&self, exec_seq: u64) -> Option<RunResult> {
        self.live()
            .outputs
            .get(&exec_seq)
            .filter(|(kept, _)| kept.elapsed() <= OUTPUT_RETENTION)
            .map(|(_, result)| result.clone())
    }

    /// Outputs kept in memory now (for `status`).
    pub fn kept_outputs(&self) -> usize {
        self.live().outputs.len()
    }

    /// The journal's size and growth. Waits while a group commits: off the async threads, use
    /// `Ledger::journal_handle` in a blocking task.
    pub fn journal_stats(&self) -> crate::journal::JournalStats {
        self.journal.lock().expect("journal lock").stats()
    }

    /// The shared journal, for reading its statistics off the async threads (`status`).
    pub(super) fn journal_handle(&self) -> Arc<GroupCommit<Event>> {
        self.journal.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_event_wakes_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let ledger = Ledger::new(Journal::open(&state).unwrap(), Book::new());
        let mut changes = ledger.changed();
        assert!(!changes.has_changed().unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stop = Event::Stop {
            reason: "test".into(),
            in_flight: 0,
        };
        let appended = runtime.block_on(ledger.record(stop)).unwrap();
        assert!(changes.has_changed().unwrap(), "a waiter was not woken");
        changes.borrow_and_update();
        // A reserved id is never handed out twice, and never one the book already holds.
        assert_eq!(ledger.reserve_id(), 1);
        assert_eq!(ledger.reserve_id(), 2);
        assert_eq!(ledger.read(Book::open_runs), 0);
        assert!(appended.seq >= 1);
    }
}
