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
//! One exception, asked for by name ([`GroupCommit::append_written`]): an appender whose record
//! nothing acts on (a command mapping: advice to the agent) hears as soon as its line is
//! written — chained, MAC'd, in the page cache, so a kill of the daemon does not lose it —
//! while the lock holder goes on to the group's fdatasync, still holding the lock. Its window
//! without durability is that one fdatasync: the lock is never released with a record
//! unsynced, so seals, snapshots and every other appender see the journal as before. Its head is
//! published, and it is applied, only once durable like every record; if that fdatasync fails,
//! it is rolled back with the group (it is then lost, and logged: it was never reported
//! durable).
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
    reply: Reply,
}

/// Whoever is told once the record is written, before the fdatasync.
type Tell = Box<dyn FnOnce(Result<Appended, JournalError>) + Send>;

/// How an appender hears of its record.
enum Reply {
    /// Once it is durable and applied, or failed.
    Durable(mpsc::Sender<Result<Appended, JournalError>>),
    /// Once it is written, or failed to be; `None` once told.
    Written(Option<Tell>),
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
        self.commit(Queued {
            event,
            reply: Reply::Durable(reply),
        });
        answer
            .recv()
            .expect("the group that took an event answers it before releasing the journal")
    }

    /// Appends `event` (blocking: call it off the async threads) and calls `written` as soon
    /// as its line is written, before the fdatasync that makes it durable (or with its error,
    /// if it could not be written); returns once that fdatasync is done. Only for a record
    /// nothing acts on: a kernel crash or power cut within that fdatasync loses it, and so does
    /// a failed fdatasync (logged). See the module docs.
    pub fn append_written(
        &self,
        event: E,
        written: impl FnOnce(Result<Appended, JournalError>) + Send + 'static,
    ) {
        self.commit(Queued {
            event,
            reply: Reply::Written(Some(Box::new(written))),
        });
    }

    /// Queues `queued`, takes the lock and commits whatever is queued then (see the module
    /// docs). When this returns, `queued` has been answered, by this thread or another.
    fn commit(&self, queued: Queued<E>) {
        self.queue.lock().expect("journal queue lock").push(queued);
        let mut journal = self.journal.lock().expect("journal lock");
        let group = std::mem::take(&mut *self.queue.lock().expect("journal queue lock"));
        if group.is_empty() {
            return;
        }
        let (events, mut replies): (Vec<E>, Vec<Reply>) = group
            .into_iter()
            .map(|queued| (queued.event, queued.reply))
            .unzip();
        let results = journal.append_group_telling(&events, |index, appended| {
            if let Reply::Written(tell) = &mut replies[index]
                && let Some(tell) = tell.take()
            {
                tell(Ok(appended.clone()));
            }
        });
        for ((event, reply), result) in events.iter().zip(replies).zip(results) {
            if let Ok(appended) = &result {
                (self.apply)(event, appended);
            }
            match reply {
                // Only an appender that panicked has stopped listening; its record stands.
                Reply::Durable(sender) => {
                    let _ = sender.send(result);
                }
                Reply::Written(Some(tell)) => tell(result),
                Reply::Written(None) => {
                    if let Err(error) = result {
                        tracing::error!(
                            %error,
                            "a record answered once written is lost: the fdatasync that was to \
                             make it durable failed, and it was rolled back"
                        );
                    }
                }
            }
        }
        if let Some(state) = &self.state
            && journal.snapshot_due()
            && let Err(error) = journal.write_snapshot(&state())
        {
            tracing::warn!(%error, "state snapshot not written; the next restart reads more");
        }
    }

    /// The journal itself, for what is not an append (seals, statistics). Appenders wait.
    pub fn lock(&self) -> LockResult<MutexGuard<'_, Journal>> {
        self.journal.lock()
    }
}
