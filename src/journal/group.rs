//! Group commit: concurrent appenders share one fdatasync, and each still returns only once its
//! own record is durable.
//!
//! An appender queues its event, then takes the journal lock. Whoever holds the lock writes every
//! event queued so far as one group ([`Journal::append_group`]: one fdatasync for all of them),
//! applies each durable record with the applier (in journal order, still holding the lock, so
//! whatever the applier maintains sees the journal's order), and only then hands each appender
//! its result. An appender whose event another one took finds the queue without it and waits for
//! that result. So no appender hears of its record before the fdatasync that covers it, and no
//! record is applied before it is durable. There is no timer and no waiting for company: a lone
//! appender commits alone; appenders that arrive while an fdatasync runs form the next group.
//!
//! With a state source ([`GroupCommit::with_snapshots`]), the lock holder also writes a state
//! snapshot when [`Journal::snapshot_due`] after a group, still holding the lock: the state it
//! reads is then exactly the replay of every record before the snapshot.
#![forbid(unsafe_code)]

use std::sync::{LockResult, Mutex, MutexGuard, mpsc};

use serde::Serialize;

use super::{Appended, Journal, JournalError};

/// What is done with each durable record, in journal order, before its appender hears of it.
type Applier<E> = Box<dyn Fn(&E, &Appended) + Send + Sync>;

/// The live state to snapshot, as the layer above serializes it.
type StateSource = Box<dyn Fn() -> serde_json::Value + Send + Sync>;

/// A journal shared by concurrent appenders (see the module docs).
pub struct GroupCommit<E> {
    journal: Mutex<Journal>,
    queue: Mutex<Vec<Queued<E>>>,
    apply: Applier<E>,
    state: Option<StateSource>,
}

struct Queued<E> {
    event: E,
    reply: mpsc::Sender<Result<Appended, JournalError>>,
}

impl<E: Serialize> GroupCommit<E> {
    /// `apply` runs for every durable record, in journal order, before its appender returns.
    pub fn new(
        journal: Journal,
        apply: impl Fn(&E, &Appended) + Send + Sync + 'static,
    ) -> GroupCommit<E> {
        GroupCommit {
            journal: Mutex::new(journal),
            queue: Mutex::new(Vec::new()),
            apply: Box::new(apply),
            state: None,
        }
    }

    /// Snapshot `state()` whenever one is due (see the module docs). A snapshot that cannot be
    /// written is logged and retried after the next group: it costs only restart time.
    pub fn with_snapshots(
        mut self,
        state: impl Fn() -> serde_json::Value + Send + Sync + 'static,
    ) -> GroupCommit<E> {
        self.state = Some(Box::new(state));
        self
    }

    /// Appends `event` (blocking: call it off the async threads) and returns once it is durable
    /// and applied. Errors are those of [`Journal::append`], for this event alone.
    pub fn append(&self, event: E) -> Result<Appended, JournalError> {
        let (reply, answer) = mpsc::channel();
        self.queue
            .lock()
            .expect("journal queue lock")
            .push(Queued { event, reply });
        {
            let mut journal = self.journal.lock().expect("journal lock");
            let group = std::mem::take(&mut *self.queue.lock().expect("journal queue lock"));
            if !group.is_empty() {
                let (events, replies): (Vec<E>, Vec<_>) = group
                    .into_iter()
                    .map(|queued| (queued.event, queued.reply))
                    .unzip();
                let results = journal.append_group(&events);
                for ((event, reply), result) in events.iter().zip(replies).zip(results) {
                    if let Ok(appended) = &result {
                        (self.apply)(event, appended);
                    }
                    // Only an appender that panicked has stopped listening; its record stands.
                    let _ = reply.send(result);
                }
                if let Some(state) = &self.state
                    && journal.snapshot_due()
                    && let Err(error) = journal.write_snapshot(&state())
                {
                    tracing::warn!(%error, "state snapshot not written; the next restart reads more");
                }
            }
        }
        answer
            .recv()
            .expect("the group that took an event answers it before releasing the journal")
    }

    /// The journal itself, for what is not an append (seals, statistics). Appenders wait.
    pub fn lock(&self) -> LockResult<MutexGuard<'_, Journal>> {
        self.journal.lock()
    }
}
