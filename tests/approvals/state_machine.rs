//! The proposal book has one state machine (invariants 4 and 9): after every step of any
//! sequence of proposals, approvals, denials, resolutions, expiries, idempotent retries, client
//! hang-ups, crashes and restarts, the daemon's live book equals the book replayed from its
//! journal — replayed from the first record, and from the latest state snapshot as a restart
//! does (the daemon here snapshots every KiB, so restarts start from snapshots too) — and no
//! proposal and no idempotency key ever runs twice.
//!
//! The daemon is real (policy, sandboxed children, fsync'd journal, the request handlers) and is
//! driven in-process with `Daemon::respond`, the same dispatch a connection uses; a restart drops
//! it and starts a new one on the same state directory; a crash aborts a run mid-flight (no end
//! record) before the restart. Needs no root.
//!
//! One verb (`pair`) needs a quorum of two, one `sre` and one `dba`: approvals of it, and crashes
//! between them, are steps too, and after every step no proposal has run on fewer than two
//! approvals by two people.
use crate::common::policy::{Category, Param, Policy, Quorum, Verb};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbd::approvals::Book;
use verbd::loader::{Loader, PolicySource};
use verbd::policy::Caller;
use verbd::protocol::{Outcome, Request, Response, State};
use verbd::server::{Daemon, ServeSettings};

const AGENT: u32 = 62001;
/// The daemon here writes a state snapshot after every KiB of records (the journal's least).
const SNAPSHOT_BYTES: u64 = verbd::journal::MIN_SNAPSHOT_BYTES;
const SRE: u32 = 62002;
const DBA: u32 = 62003;

fn policy(dir: &Path) -> String {
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let append = |description: &str| {
        Verb::builtin(Category::Mutating, "file.append", &[out])
            .description(description)
            .roles(&["agent"])
    };
    let sleep = |category, description: &str, secs: Param| {
        Verb::command(category, "/bin/sleep {secs}")
            .description(description)
            .roles(&["agent"])
            .timeout("60s")
            .param("secs", secs)
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("sre", &[SRE])
        .humans("dba", &[DBA])
        .approvers(&["sre", "dba"])
        .approvals_expire("300ms")
        .verb(
            "pair",
            append("append a line once an sre and a dba approved").quorum(Quorum {
                count: 2,
                from: vec!["sre".into(), "dba".into()],
                max_per_role: Some(1),
            }),
        )
        .verb("note", append("append a note (needs approval)"))
        .verb(
            "slow",
            sleep(
                Category::Mutating,
                "a slow change (needs approval)",
                Param::matching(r"[0-9]+(\.[0-9]+)?"),
            ),
        )
        .verb("tick", append("append a tick at once").without_approval())
        .verb(
            "nap",
            sleep(Category::ReadOnly, "a long read", Param::int(1, 999)),
        )
        .render()
}

fn caller(uid: u32) -> Caller {
    Caller {
        uid,
        gid: uid,
        pid: 1,
        user: None,
        groups: Vec::new(),
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Op {
    /// The agent proposes `note` (or `slow`, which runs for a while once approved).
    Propose {
        slow: bool,
        content: u8,
    },
    Approve {
        pick: usize,
    },
    /// The agent proposes `pair` (two approvals: an sre's and a dba's).
    ProposePair {
        content: u8,
    },
    /// The dba approves (the sre approves with `Approve`).
    ApproveDba {
        pick: usize,
    },
    Deny {
        pick: usize,
    },
    Resolve {
        pick: usize,
        outcome: u8,
    },
    /// Let pending proposals pass their expiry, then list them (which expires them).
    Expire,
    /// A keyed direct call (the first runs, every retry must not).
    Retry {
        key: u8,
    },
    /// A keyed call whose client hangs up while it runs.
    HangUp {
        key: u8,
    },
    /// The daemon stops and a new one starts on the same journal.
    Restart,
    /// The daemon dies while an approved `slow` proposal (or a keyed nap) runs, then restarts.
    Crash {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0u8..4).prop_map(|(slow, content)| Op::Propose { slow, content }),
        4 => any::<usize>().prop_map(|pick| Op::Approve { pick }),
        2 => (0u8..4).prop_map(|content| Op::ProposePair { content }),
        3 => any::<usize>().prop_map(|pick| Op::ApproveDba { pick }),
        2 => any::<usize>().prop_map(|pick| Op::Deny { pick }),
        2 => (any::<usize>(), 0u8..3).prop_map(|(pick, outcome)| Op::Resolve { pick, outcome }),
        1 => Just(Op::Expire),
        3 => (0u8..3).prop_map(|key| Op::Retry { key }),
        2 => (0u8..3).prop_map(|key| Op::HangUp { key }),
        2 => Just(Op::Restart),
        1 => any::<usize>().prop_map(|pick| Op::Crash { pick }),
    ]
}

struct World {
    dir: tempfile::TempDir,
    daemon: Option<Arc<Daemon>>,
    /// (id, hash) of every proposal made.
    proposals: Vec<(u64, String)>,
}

impl World {
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    async fn start(&mut self) {
        let loader = Loader::new(PolicySource::File(self.dir.path().join("policy.toml")));
        std::fs::create_dir_all(self.state()).unwrap();
        let prepared = loader.prepare(loader.compile().unwrap(), None).unwrap();
        let witness = verbd::journal::Witness::open(&self.state()).unwrap();
        let config = verbd::journal::JournalConfig {
            witness: Some(witness),
            snapshot_bytes: SNAPSHOT_BYTES,
            ..verbd::journal::JournalConfig::new(&self.state())
        };
        let (journal, book) = verbd::serve::open_journal_with(config).unwrap();
        let interrupted = book.interrupted();
        let daemon = Daemon::new(
            prepared,
            journal,
            book,
            ServeSettings {
                state_dir: self.state(),
                invoker_uid: nix::unistd::getuid().as_raw(),
                loader,
            },
        );
        daemon.record_start(interrupted).await.unwrap();
        self.daemon = Some(daemon);
    }

    fn daemon(&self) -> Arc<Daemon> {
        self.daemon.clone().unwrap()
    }

    /// Drop the daemon (every request finished or aborted first) and start a new one.
    async fn restart(&mut self) {
        let daemon = self.daemon.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&daemon) > 1 {
            assert!(Instant::now() < deadline, "the daemon is still referenced");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(daemon);
        self.start().await;
    }

    async fn ask(&self, uid: u32, request: Request) -> Response {
        let (_client, hung_up) = tokio::sync::watch::channel(false);
        self.daemon().respond(caller(uid), request, hung_up).await
    }

    fn pick(&self, pick: usize) -> Option<(u64, String)> {
        (!self.proposals.is_empty()).then(|| self.proposals[pick % self.proposals.len()].clone())
    }

    fn state_of(&self, id: u64) -> Option<State> {
        self.daemon().ledger().read(|b| b.get(id).map(|p| p.state))
    }

    async fn until_running(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.daemon().ledger().read(Book::open_runs) == 0 {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    async fn step(&mut self, op: &Op) {
        let out = self.dir.path().join("out");
        match op {
            Op::Propose { slow, content } => {
                let (verb, args) = if *slow {
                    ("slow", BTreeMap::from([("secs".into(), "0.2".into())]))
                } else {
                    (
                        "note",
                        BTreeMap::from([
                            ("path".into(), out.join("notes").display().to_string()),
                            ("content".into(), format!("note {content}\n")),
                        ]),
                    )
                };
                let request = Request::Call {
                    verb: verb.into(),
                    args: verbd::policy::text_args(&args),
                    reason: Some("property test".into()),
                    idempotency_key: None,
                    stream: None,
                };
                if let Response::ConfirmRequired { id, hash, .. } = self.ask(AGENT, request).await
                    && !self.proposals.iter().any(|(known, _)| *known == id)
                {
                    self.proposals.push((id, hash));
                }
            }
            Op::Approve { pick } => {
                if let Some((id, hash)) = self.pick(*pick) {
                    self.ask(SRE, Request::Approve { id, hash }).await;
                }
            }
            Op::ProposePair { content } => {
                let args = BTreeMap::from([
                    ("path".into(), out.join("pairs").display().to_string()),
                    ("content".into(), format!("pair {content}\n")),
                ]);
                let request = Request::Call {
                    verb: "pair".into(),
                    args: verbd::policy::text_args(&args),
                    reason: Some("property test".into()),
                    idempotency_key: None,
                    stream: None,
                };
                if let Response::ConfirmRequired { id, hash, .. } = self.ask(AGENT, request).await
                    && !self.proposals.iter().any(|(known, _)| *known == id)
                {
                    self.proposals.push((id, hash));
                }
            }
            Op::ApproveDba { pick } => {
                if let Some((id, hash)) = self.pick(*pick) {
                    self.ask(DBA, Request::Approve { id, hash }).await;
                }
            }
            Op::Deny { pick } => {
                if let Some((id, _)) = self.pick(*pick) {
                    let reason = "no".to_string();
                    self.ask(SRE, Request::Deny { id, reason }).await;
                }
            }
            Op::Resolve { pick, outcome } => {
                if let Some((id, _)) = self.pick(*pick) {
                    let outcome = [Outcome::Succeeded, Outcome::Failed, Outcome::NotRun]
                        [*outcome as usize % 3];
                    let note = "checked".to_string();
                    self.ask(SRE, Request::Resolve { id, outcome, note }).await;
                }
            }
            Op::Expire => {
                tokio::time::sleep(Duration::from_millis(320)).await;
                self.ask(SRE, Request::Pending {}).await;
            }
            Op::Retry { key } => {
                let args = BTreeMap::from([
                    (
                        "path".into(),
                        out.join(format!("ticks{key}")).display().to_string(),
                    ),
                    ("content".into(), "tick\n".into()),
                ]);
                let request = Request::Call {
                    verb: "tick".into(),
                    args: verbd::policy::text_args(&args),
                    reason: None,
                    idempotency_key: Some(format!("tick-{key}")),
                    stream: None,
                };
                self.ask(AGENT, request).await;
            }
            Op::HangUp { key } => {
                let request = Request::Call {
                    verb: "nap".into(),
                    args: verbd::policy::text_args(&BTreeMap::from([("secs".into(), "30".into())])),
                    reason: None,
                    idempotency_key: Some(format!("nap-{key}")),
                    stream: None,
                };
                let (client, hung_up) = tokio::sync::watch::channel(false);
                let task = tokio::spawn(self.daemon().respond(caller(AGENT), request, hung_up));
                // A retry of a key already used answers at once; a first call runs.
                tokio::time::sleep(Duration::from_millis(5)).await;
                if !task.is_finished() {
                    self.until_running().await;
                }
                client.send_replace(true);
                let _ = task.await;
            }
            Op::Restart => self.restart().await,
            Op::Crash { pick } => {
                let approvable = self
                    .pick(*pick)
                    .filter(|(id, _)| self.state_of(*id) == Some(State::Pending));
                let request = match approvable {
                    // Between the approvals of a quorum, too: the dba's after the sre's.
                    Some((id, hash)) => {
                        let sre_approved = self.daemon().ledger().read(|b| {
                            b.get(id)
                                .is_some_and(|p| p.approvals.iter().any(|a| a.uid == SRE))
                        });
                        let approver = if sre_approved { DBA } else { SRE };
                        (approver, Request::Approve { id, hash })
                    }
                    None => (
                        AGENT,
                        Request::Call {
                            verb: "nap".into(),
                            args: verbd::policy::text_args(&BTreeMap::from([(
                                "secs".into(),
                                "30".into(),
                            )])),
                            reason: None,
                            idempotency_key: None,
                            stream: None,
                        },
                    ),
                };
                let (client, hung_up) = tokio::sync::watch::channel(false);
                let task =
                    tokio::spawn(self.daemon().respond(caller(request.0), request.1, hung_up));
                // Until the run starts, or the request is answered (an approval short of a
                // quorum starts none).
                let deadline = Instant::now() + Duration::from_secs(10);
                while !task.is_finished()
                    && self.daemon().ledger().read(Book::open_runs) == 0
                    && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                // The crash itself: the caller shuts the runtime down with this still running.
                std::mem::forget(client);
            }
        }
    }

    /// The book replayed from the journal as it is on disk now.
    fn replayed(&self) -> Book {
        let records = verbd::journal::replay(&self.state()).unwrap();
        let events = records.into_iter().filter_map(|r| {
            let time = verbd::journal::parse_rfc3339(&r.time).unwrap();
            verbd::events::decode(r.seq, &r.event)
                .unwrap()
                .map(|e| (r.seq, time, e))
        });
        let (book, conflicts) = Book::replay(events);
        assert!(conflicts.is_empty(), "conflicts: {conflicts:?}");
        book
    }

    /// The book as a restart rebuilds it: the latest state snapshot, then the records after it.
    /// `None` while the journal has no snapshot yet.
    fn replayed_from_snapshot(&self) -> Option<Book> {
        let mut records =
            verbd::journal::replay_from_snapshot::<verbd::approvals::BookSnapshot>(&self.state())
                .unwrap();
        let snapshot = records.snapshot.take()?;
        let mut book = Book::from_snapshot(snapshot.state).unwrap();
        for r in records.by_ref() {
            let time = verbd::journal::parse_rfc3339(&r.time).unwrap();
            if let Some(event) = verbd::events::decode(r.seq, &r.event).unwrap() {
                book.apply(r.seq, time, &event).unwrap();
            }
        }
        records.finish().unwrap();
        Some(book)
    }

    /// Runs of a proposal that needs a quorum before two people approved it.
    fn runs_short(&self) -> Vec<String> {
        let mut quorum = std::collections::BTreeSet::new();
        let mut approvers = BTreeMap::<u64, std::collections::BTreeSet<u64>>::new();
        let mut short = Vec::new();
        for record in verbd::journal::replay(&self.state()).unwrap() {
            let e = &record.event;
            let id = e["id"].as_u64();
            match e["kind"].as_str().unwrap_or_default() {
                "proposal_created" if e["proposal"]["quorum"].is_object() => {
                    quorum.extend(id);
                }
                "proposal_approval_given" | "proposal_approved" => {
                    let by = e["by"]["uid"].as_u64().unwrap();
                    approvers.entry(id.unwrap()).or_default().insert(by);
                }
                "exec" => {
                    if let Some(p) = e["proposal"].as_u64()
                        && quorum.contains(&p)
                    {
                        let given = approvers.get(&p).map_or(0, |a| a.len());
                        if given < 2 {
                            short.push(format!("proposal {p} ran after {given} approval(s)"));
                        }
                    }
                }
                _ => {}
            }
        }
        short
    }

    /// Exec records per proposal and per (caller, idempotency key): each at most one.
    fn runs_twice(&self) -> Vec<String> {
        let mut seen = BTreeMap::<String, usize>::new();
        for record in verbd::journal::replay(&self.state()).unwrap() {
            let e = &record.event;
            if e["kind"] != "exec" {
                continue;
            }
            if let Some(id) = e["proposal"].as_u64() {
                *seen.entry(format!("proposal {id}")).or_default() += 1;
            }
            if let Some(key) = e["idempotency_key"].as_str() {
                *seen.entry(format!("key {key}")).or_default() += 1;
            }
        }
        seen.into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(what, n)| format!("{what} ran {n} times"))
            .collect()
    }
}

/// Run `ops` on a fresh daemon, checking after every step; the final book and how many steps
/// were checked against a replay from a snapshot.
fn check_sequence(ops: Vec<Op>) -> Result<(Book, usize), TestCaseError> {
    let runtime = new_runtime();
    let mut world = runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        std::fs::write(dir.path().join("policy.toml"), policy(dir.path())).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let mut world = World {
            dir,
            daemon: None,
            proposals: Vec::new(),
        };
        world.start().await;
        Ok::<World, TestCaseError>(world)
    })?;
    let mut runtime = runtime;
    let mut from_snapshots = 0;
    for (step, op) in ops.iter().enumerate() {
        runtime.block_on(world.step(op));
        if matches!(op, Op::Crash { .. }) {
            // The daemon dies: every task is dropped where it stands (a dropped run kills its
            // process group), nothing more is journaled. Then a new daemon starts.
            std::mem::replace(&mut runtime, new_runtime()).shutdown_timeout(Duration::from_secs(5));
            let daemon = world.daemon.take().unwrap();
            assert_eq!(
                Arc::strong_count(&daemon),
                1,
                "the dead daemon is still referenced"
            );
            drop(daemon);
            runtime.block_on(world.start());
        }
        let live = world.daemon().ledger().snapshot();
        let replayed = world.replayed();
        prop_assert_eq!(
            &live,
            &replayed,
            "after step {} ({:?}) the live book differs from the replayed one",
            step,
            op
        );
        if let Some(from_snapshot) = world.replayed_from_snapshot() {
            from_snapshots += 1;
            prop_assert_eq!(
                &live,
                &from_snapshot,
                "after step {} ({:?}) the live book differs from the one replayed from the latest snapshot",
                step,
                op
            );
        }
        let short = world.runs_short();
        prop_assert!(
            short.is_empty(),
            "after step {} ({:?}): {:?}",
            step,
            op,
            short
        );
        let twice = world.runs_twice();
        prop_assert!(
            twice.is_empty(),
            "after step {} ({:?}): {:?}",
            step,
            op,
            twice
        );
    }
    let book = world.daemon().ledger().snapshot();
    runtime.block_on(async move { drop(world) });
    Ok((book, from_snapshots))
}

fn new_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_live_book_always_equals_the_replayed_book_and_nothing_runs_twice(
        ops in proptest::collection::vec(op(), 1..14)
    ) {
        check_sequence(ops)?;
    }
}

/// The sequence that exercises every divergence the two state machines once had, in one run:
/// a resolved unknown outcome, a hung-up keyed call, a retry, a denial, restarts between them.
#[test]
fn every_former_divergence_in_one_sequence() {
    let (book, from_snapshots) = check_sequence(vec![
        Op::Propose {
            slow: true,
            content: 0,
        },
        Op::Crash { pick: 0 },
        Op::Resolve {
            pick: 0,
            outcome: 0,
        },
        Op::Restart,
        Op::HangUp { key: 1 },
        Op::HangUp { key: 1 },
        Op::Restart,
        Op::HangUp { key: 1 },
        Op::Retry { key: 2 },
        Op::Retry { key: 2 },
        Op::Propose {
            slow: false,
            content: 1,
        },
        Op::Deny { pick: 1 },
        Op::Restart,
        Op::Approve { pick: 1 },
    ])
    .unwrap();
    assert!(
        from_snapshots >= 5,
        "only {from_snapshots} steps were checked against a replay from a snapshot"
    );
    let resolved = book.get(1).unwrap();
    assert_eq!(resolved.state, State::Resolved, "{resolved:?}");
    assert_eq!(resolved.outcome, Some(Outcome::Succeeded));
    let denied = book.get(2).unwrap();
    assert_eq!(denied.state, State::Denied, "{denied:?}");
    let hung_up = book
        .key(AGENT, "nap-1", std::time::SystemTime::now())
        .unwrap();
    assert!(
        matches!(
            hung_up.target,
            verbd::approvals::KeyTarget::Run {
                end: verbd::approvals::RunEnd::Cancelled,
                ..
            }
        ),
        "{hung_up:?}"
    );
}

/// A quorum of two across a crash and restarts: the sre's approval survives the crash, the same
/// sre again does not count, the dba's completes it (unless it expired first), and it runs once.
#[test]
fn a_quorum_survives_crashes_between_its_approvals_and_runs_once() {
    let (book, _) = check_sequence(vec![
        Op::ProposePair { content: 0 },
        Op::Crash { pick: 0 },
        Op::Approve { pick: 0 },
        Op::Restart,
        Op::ApproveDba { pick: 0 },
        Op::Restart,
    ])
    .unwrap();
    // Every step checked the book against replays and that nothing ran short or twice; the
    // proposals here expire after 300 ms, which a slow machine may reach between the steps.
    let pair = book.get(1).unwrap();
    let uids: Vec<u32> = pair.approvals.iter().map(|a| a.uid).collect();
    match pair.state {
        State::Succeeded => assert_eq!(uids, vec![SRE, DBA], "{pair:?}"),
        State::Expired => assert_eq!(uids, vec![SRE], "{pair:?}"),
        _ => panic!("{pair:?}"),
    }
}
