//! Unit tests of the proposal book: transitions, approvals that count, retention and pruning
//! by record time, and the checks the daemon makes before it journals.

use super::*;
use crate::events::{CallerRecord, RunDecision};
use crate::proposal::{Decider, PROPOSAL_VERSION, RequesterRecord};

fn proposal(id: u64) -> Proposal {
    Proposal {
        id,
        version: PROPOSAL_VERSION,
        verb: "scale".into(),
        description: String::new(),
        category: "mutating".into(),
        args: BTreeMap::new(),
        args_hash: "ab".repeat(32),
        argv: vec!["/bin/true".into()],
        pins: Vec::new(),
        dry_run_argv: None,
        dry_run_output: None,
        requester: RequesterRecord {
            uid: 1000,
            gid: 1000,
            user: None,
            pid: 1,
        },
        reason: None,
        policy_hash: String::new(),
        verb_fingerprint: String::new(),
        created_ms: 0,
        expires_ms: u64::MAX,
        idempotency_key: None,
        state: State::Pending,
        quorum: None,
        approvals: Vec::new(),
        break_glass: false,
        decided_by: None,
        note: None,
        outcome: None,
        exec_seq: None,
        exit_code: None,
        signal: None,
    }
}

/// Proposal `id` (requester uid 1000) journaled as created.
fn created(id: u64) -> Event {
    Event::ProposalCreated {
        id,
        proposal: Box::new(proposal(id)),
    }
}

/// Proposal `id` approved by uid 5 (no quorum).
fn approved(id: u64) -> Event {
    Event::ProposalApproved {
        id,
        by: Decider { uid: 5, user: None },
        hash: "ab".repeat(32),
        role: None,
    }
}

fn exec(proposal: Option<u64>) -> Event {
    Event::Exec {
        caller: CallerRecord {
            uid: 1000,
            gid: 1000,
            pid: 1,
            user: None,
            roles: vec![],
        },
        decision: RunDecision::Approved,
        verb: "scale".into(),
        args: BTreeMap::new(),
        args_hash: "ab".repeat(32),
        argv: vec![],
        proposal,
        idempotency_key: None,
    }
}

#[test]
fn a_start_ends_an_interrupted_run_as_unknown_outcome() {
    let now = SystemTime::now();
    let by = Decider { uid: 5, user: None };
    let events = vec![
        (1, now, created(7)),
        (
            2,
            now,
            Event::ProposalApproved {
                id: 7,
                by: by.clone(),
                hash: "ab".repeat(32),
                role: None,
            },
        ),
        (3, now, exec(Some(7))),
        (4, now, created(8)),
        (
            5,
            now,
            Event::ProposalApproved {
                id: 8,
                by: by.clone(),
                hash: "ab".repeat(32),
                role: None,
            },
        ),
    ];
    let (mut book, conflicts) = Book::replay(events);
    assert!(conflicts.is_empty(), "{conflicts:?}");
    assert_eq!(
        book.interrupted(),
        Interrupted {
            executing: vec![7],
            never_started: vec![8],
        },
        "what the start will journal: 7 as unknown_outcome, 8 as not started"
    );
    let start = Event::Start {
        version: String::new(),
        policy: String::new(),
        policy_hash: String::new(),
        pid: 1,
        uid: 0,
    };
    book.apply(6, now, &start).unwrap();
    assert_eq!(book.get(7).unwrap().state, State::UnknownOutcome);
    assert_eq!(book.get(8).unwrap().state, State::Failed);
    assert_eq!(book.next_id(), 9);
    assert_eq!(book.open_runs(), 0);
}

#[test]
fn an_event_that_does_not_fit_changes_nothing() {
    let now = SystemTime::now();
    let mut book = Book::new();
    book.apply(1, now, &created(1)).unwrap();
    book.apply(2, now, &Event::ProposalExpired { id: 1 })
        .unwrap();
    let before = book.clone();
    let by = Decider { uid: 5, user: None };
    let err = book
        .apply(
            3,
            now,
            &Event::ProposalApproved {
                id: 1,
                by,
                hash: String::new(),
                role: None,
            },
        )
        .unwrap_err();
    assert!(err.message.contains("expired"), "{err}");
    assert_eq!(book, before);
}
/// The `result` record of the run journaled at `exec_seq`, with its exit and error.
fn result(
    exec_seq: u64,
    exit_code: Option<i32>,
    signal: Option<i32>,
    error: Option<&str>,
) -> Event {
    let output = || crate::events::OutputRecord {
        bytes: 0,
        kept: 0,
        truncated: false,
        sha256: String::new(),
    };
    Event::Result {
        verb: "scale".into(),
        exec_seq,
        proposal: None,
        exit_code,
        signal,
        timed_out: false,
        duration_ms: 0,
        stdout: output(),
        stderr: output(),
        error: error.map(str::to_owned),
        ended_by: None,
    }
}

/// A proposal's run counts as succeeded only when it exited 0 and nothing went wrong: one
/// killed by a signal (no exit code) or with an error beside exit 0 failed.
#[test]
fn only_a_clean_exit_zero_is_a_proposal_s_success() {
    let now = SystemTime::now();
    let cases = [
        (Some(0), None, None, State::Succeeded),
        (Some(1), None, None, State::Failed),
        (None, Some(9), None, State::Failed),
        (
            Some(0),
            None,
            Some("the output could not be read"),
            State::Failed,
        ),
    ];
    for (exit_code, signal, error, state) in cases {
        let events = vec![
            (1, now, created(1)),
            (2, now, approved(1)),
            (3, now, exec(Some(1))),
            (4, now, result(3, exit_code, signal, error)),
        ];
        let (book, conflicts) = Book::replay(events);
        assert!(conflicts.is_empty(), "{conflicts:?}");
        assert_eq!(
            book.get(1).unwrap().state,
            state,
            "exit {exit_code:?}, signal {signal:?}, error {error:?}"
        );
    }
}

/// A proposal is created once, under its own id: a second creation, or one whose id is not
/// its proposal's, is a conflict and changes nothing.
#[test]
fn a_proposal_is_created_once_under_its_own_id() {
    let now = SystemTime::now();
    let mut book = Book::new();
    book.apply(1, now, &created(1)).unwrap();
    let before = book.clone();
    let mut other = proposal(1);
    other.verb = "drop".into();
    for (id, p) in [(1, other), (2, proposal(1))] {
        let err = book
            .apply(
                2,
                now,
                &Event::ProposalCreated {
                    id,
                    proposal: Box::new(p),
                },
            )
            .unwrap_err();
        assert!(err.message.contains("created twice"), "{err}");
        assert_eq!(book, before, "proposal {id} changed the book");
    }
}

/// Rate limits count a run as long as their window holds it (`t >= now - per`), and the
/// book keeps it exactly that long: a run exactly [`RATE_HISTORY`] old still counts for a
/// limit per [`RATE_HISTORY`].
#[test]
fn a_run_counts_for_its_rate_until_the_history_ends() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut book = Book::new();
    let mut run = exec(None);
    if let Event::Exec { decision, .. } = &mut run {
        *decision = RunDecision::Run;
    }
    book.apply(1, t0, &run).unwrap();
    book.apply(2, t0, &result(1, Some(0), None, None)).unwrap();
    let per_hour = Some(Rate {
        count: 1,
        per: Duration::from_secs(3600),
    });
    // Prunes within the hour keep the run: the limit holds for the whole hour.
    for minutes in [2, 30, 59] {
        let at = t0 + Duration::from_secs(60 * minutes);
        book.apply(
            2 + minutes,
            at,
            &Event::Stop {
                reason: String::new(),
                in_flight: 0,
            },
        )
        .unwrap();
        assert!(
            book.rate_exceeded("scale", 1000, per_hour, None, at)
                .is_some(),
            "a run {minutes} min old no longer counted for a limit per hour"
        );
    }
    let edge = t0 + RATE_HISTORY;
    book.apply(
        3,
        edge,
        &Event::Stop {
            reason: String::new(),
            in_flight: 0,
        },
    )
    .unwrap();
    let per_history = Some(Rate {
        count: 1,
        per: RATE_HISTORY,
    });
    assert!(
        book.rate_exceeded("scale", 1000, per_history, None, edge)
            .is_some(),
        "a run exactly one rate history old no longer counted"
    );
}

/// [`Book::check`] refuses exactly what [`Book::apply`] would refuse as a conflict, for every
/// event that moves a proposal, whatever state the proposal is in.
#[test]
fn the_check_refuses_exactly_what_apply_would() {
    let now = SystemTime::now();
    let by = || Decider { uid: 5, user: None };
    // Proposal 1 pending; 2 executing (exec seq 5); 3 executing (exec seq 7) and then found
    // without an end, its run still open; 4 approved, not started.
    let (book, conflicts) = Book::replay(vec![
        (1, now, created(1)),
        (2, now, created(2)),
        (3, now, created(3)),
        (4, now, approved(2)),
        (5, now, exec(Some(2))),
        (6, now, approved(3)),
        (7, now, exec(Some(3))),
        (8, now, Event::ProposalUnknownOutcome { id: 3 }),
        (9, now, created(4)),
        (10, now, approved(4)),
    ]);
    assert!(conflicts.is_empty(), "{conflicts:?}");
    let moves = |id: u64| {
        vec![
            approved(id),
            Event::ProposalDenied {
                id,
                by: by(),
                reason: crate::events::Bounded::new("no"),
            },
            Event::ProposalExpired { id },
            Event::ProposalUnknownOutcome { id },
            Event::ProposalNotStarted { id, reason: None },
            Event::ProposalResolved {
                id,
                by: by(),
                outcome: crate::proposal::Outcome::NotRun,
                note: crate::events::Bounded::new("checked"),
            },
            exec(Some(id)),
        ]
    };
    let mut events: Vec<Event> = (1..=4).flat_map(moves).collect();
    events.extend([
        result(5, Some(0), None, None),
        result(7, Some(0), None, None),
        Event::Cancelled {
            verb: "scale".into(),
            exec_seq: 7,
            proposal: Some(3),
            cause: crate::events::CancelCause::ClientHungUp,
            duration_ms: 0,
        },
    ]);
    let mut refused = 0;
    for event in &events {
        let applied = book.clone().apply(11, now, event);
        let checked = book.check(event);
        assert_eq!(
            checked.is_err(),
            applied.is_err(),
            "check says {checked:?}, apply says {applied:?} for {event:?}"
        );
        refused += usize::from(checked.is_err());
    }
    assert!(refused > events.len() / 2, "only {refused} events refused");
}

/// A key the book still answers always finds its proposal: at the very edge of the window a
/// keyed proposal decided in the millisecond it was made is still there for the retry.
#[test]
fn a_live_key_never_points_to_a_dropped_proposal() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut keyed = proposal(1);
    keyed.idempotency_key = Some("k".into());
    let (mut book, conflicts) = Book::replay(vec![
        (
            1,
            t0,
            Event::ProposalCreated {
                id: 1,
                proposal: Box::new(keyed),
            },
        ),
        (
            2,
            t0,
            Event::ProposalDenied {
                id: 1,
                by: Decider { uid: 5, user: None },
                reason: crate::events::Bounded::new("no"),
            },
        ),
    ]);
    assert!(conflicts.is_empty(), "{conflicts:?}");
    let edge = t0 + IDEMPOTENCY_WINDOW;
    let stop = Event::Stop {
        reason: String::new(),
        in_flight: 0,
    };
    book.apply(3, edge, &stop).unwrap();
    let entry = book
        .key(1000, "k", edge)
        .expect("the key holds for the whole window");
    assert_eq!(entry.target, KeyTarget::Proposal(1));
    assert!(book.get(1).is_some(), "the key's proposal was dropped");
    // The next prune (one interval on) drops both.
    let next = edge + PRUNE_INTERVAL;
    book.apply(4, next, &stop).unwrap();
    assert!(book.key(1000, "k", next).is_none());
    assert!(book.get(1).is_none(), "the proposal outlived its retention");
}

/// Each requester's pending proposals count against its own budget only, and a proposal is
/// someone's pending one until the very millisecond the book counts it as overdue.
#[test]
fn pending_proposals_are_counted_per_requester_until_their_expiry() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut book = Book::new();
    let mut theirs = proposal(2);
    theirs.requester.uid = 2000;
    // Decided before its expiry, which has passed since: never overdue.
    let mut decided = proposal(3);
    decided.expires_ms = unix_ms(t0);
    let mut mine = proposal(1);
    mine.expires_ms = unix_ms(t0 + Duration::from_secs(60));
    for (seq, p) in [(1, mine.clone()), (2, theirs), (3, decided)] {
        let id = p.id;
        book.apply(
            seq,
            t0,
            &Event::ProposalCreated {
                id,
                proposal: Box::new(p),
            },
        )
        .unwrap();
    }
    book.apply(
        4,
        t0,
        &Event::ProposalDenied {
            id: 3,
            by: Decider { uid: 5, user: None },
            reason: crate::events::Bounded::new("no"),
        },
    )
    .unwrap();
    assert_eq!(
        book.pending_count(1000),
        1,
        "another's or a decided proposal counted"
    );
    assert_eq!(book.pending_count(2000), 1);
    assert_eq!(book.pending_count(3000), 0);
    let expiry = UNIX_EPOCH + Duration::from_millis(mine.expires_ms);
    let just_before = expiry - Duration::from_millis(1);
    let found = book.pending_for(1000, "scale", &mine.args_hash, just_before);
    assert_eq!(found.map(|p| p.id), Some(1));
    assert!(book.overdue(just_before).is_empty());
    assert!(
        book.pending_for(1000, "scale", &mine.args_hash, expiry)
            .is_none(),
        "a proposal overdue at its expiry was still offered as pending"
    );
    assert_eq!(book.overdue(expiry), vec![1]);
}

/// A book holding proposal 1 (requester uid 1000) as `p` leaves it, and the check of an
/// approval record by `uid` counting for `role`.
fn check_approval(p: Proposal, uid: u32, role: Option<&str>, step: Step) -> Result<(), Unfit> {
    let mut book = Book::new();
    book.apply(
        1,
        SystemTime::now(),
        &Event::ProposalCreated {
            id: 1,
            proposal: Box::new(p),
        },
    )
    .unwrap();
    let by = Decider { uid, user: None };
    let hash = "ab".repeat(32);
    book.check(&match step {
        Step::Approve => Event::ProposalApproved {
            id: 1,
            by,
            hash,
            role: role.map(str::to_owned),
        },
        Step::Endorse => Event::ProposalApprovalGiven {
            id: 1,
            by,
            hash,
            role: role.unwrap_or_default().to_owned(),
        },
        Step::BreakGlass => Event::ProposalBreakGlass {
            id: 1,
            by,
            roles: vec!["oncall".into()],
        },
        other => panic!("not an approval step: {other:?}"),
    })
}

/// The book's own check of an approval record, below the daemon's: the daemon refuses
/// these before it builds a record, so through it they show only when two approvals race
/// (the second was built from the proposal before the first was applied). Each refusal
/// names why; each approval that counts passes.
#[test]
fn an_approval_record_that_would_not_count_is_refused_by_the_book() {
    let quorum = |count, from: &[&str], max_per_role| {
        let mut p = proposal(1);
        p.quorum = Some(crate::proposal::Quorum {
            count,
            from: from.iter().map(|r| r.to_string()).collect(),
            max_per_role,
        });
        p
    };
    let approved_by = |mut p: Proposal, approvals: &[(u32, &str)]| {
        p.approvals = approvals
            .iter()
            .map(|(uid, role)| crate::proposal::Approval {
                uid: *uid,
                user: None,
                role: Some(role.to_string()),
            })
            .collect();
        p
    };
    let refused = |result: Result<(), Unfit>, words: &str| match result {
        Err(Unfit::Approval { id: 1, reason }) => {
            assert!(reason.contains(words), "{reason:?} lacks {words:?}")
        }
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let plain = proposal(1);
    refused(
        check_approval(plain.clone(), 1000, None, Step::Approve),
        "nobody approves their own request",
    );
    assert_eq!(
        check_approval(plain.clone(), 5, None, Step::Approve).ok(),
        Some(())
    );
    refused(
        check_approval(plain.clone(), 5, None, Step::BreakGlass),
        "break-glass is the requester's own call",
    );
    assert_eq!(
        check_approval(plain, 1000, None, Step::BreakGlass).ok(),
        Some(())
    );

    let two = quorum(2, &["sre", "dba"], Some(1));
    refused(
        check_approval(two.clone(), 5, Some("sre"), Step::Approve),
        "needs 2 approvals and this is approval 1",
    );
    refused(
        check_approval(quorum(1, &["sre"], None), 5, None, Step::Approve),
        "an approval counts for one of its roles",
    );
    refused(
        check_approval(two.clone(), 5, Some("web"), Step::Endorse),
        "role `web` is not among the roles",
    );
    assert_eq!(
        check_approval(two.clone(), 5, Some("sre"), Step::Endorse).ok(),
        Some(())
    );
    let one_given = approved_by(two, &[(5, "sre")]);
    refused(
        check_approval(one_given.clone(), 5, Some("dba"), Step::Approve),
        "uid 5 already approved proposal 1",
    );
    refused(
        check_approval(one_given.clone(), 6, Some("sre"), Step::Approve),
        "role `sre` already gave 1 approval(s)",
    );
    refused(
        check_approval(one_given.clone(), 6, Some("dba"), Step::Endorse),
        "approval 2 of 2 completes proposal 1",
    );
    assert_eq!(
        check_approval(one_given, 6, Some("dba"), Step::Approve).ok(),
        Some(())
    );
}

/// What an approver reads when a decision comes too late, by the step it tried.
#[test]
fn a_decision_on_a_proposal_already_moved_names_what_happened() {
    let now = SystemTime::now();
    let mut book = Book::new();
    for id in [1, 2] {
        book.apply(id, now, &created(id)).unwrap();
    }
    let by = Decider { uid: 5, user: None };
    book.apply(
        3,
        now,
        &Event::ProposalApproved {
            id: 1,
            by: by.clone(),
            hash: "ab".repeat(32),
            role: None,
        },
    )
    .unwrap();
    let message = |event: Event| book.check(&event).unwrap_err().to_string();
    assert_eq!(
        message(Event::ProposalApproved {
            id: 1,
            by: by.clone(),
            hash: "ab".repeat(32),
            role: None,
        }),
        "proposal 1 was already decided (approved); an approval is used once"
    );
    assert_eq!(
        message(Event::ProposalDenied {
            id: 1,
            by: by.clone(),
            reason: crate::events::Bounded::new("no"),
        }),
        "proposal 1 was already decided (approved)"
    );
    assert_eq!(
        message(Event::ProposalExpired { id: 1 }),
        "proposal 1 was already decided (approved)"
    );
    assert_eq!(
        message(Event::ProposalResolved {
            id: 2,
            by,
            outcome: crate::proposal::Outcome::NotRun,
            note: crate::events::Bounded::new("checked"),
        }),
        "proposal 2 is pending, not unknown_outcome; nothing to resolve"
    );
}

/// The daemon takes record times from the wall clock, so no daemon-level test can replay a
/// key hours after its call; the book is where the window is decided, with the records'
/// times, and the daemon only asks it ([`Book::key`]).
#[test]
fn an_idempotency_key_holds_for_a_whole_day_of_record_time() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let at = |secs: u64| t0 + Duration::from_secs(secs);
    let mut keyed = exec(None);
    if let Event::Exec {
        decision,
        idempotency_key,
        ..
    } = &mut keyed
    {
        *decision = RunDecision::Run;
        *idempotency_key = Some("k".into());
    }
    let stop = Event::Stop {
        reason: String::new(),
        in_flight: 0,
    };
    let mut book = Book::new();
    book.apply(1, at(0), &keyed).unwrap();
    // Each later record is past PRUNE_INTERVAL, so each one prunes: the key must survive
    // the pruning as well as the lookup, at every hour of the day after its call.
    for (seq, hours) in [(2, 1), (3, 2), (4, 12), (5, 23)] {
        let now = at(hours * 3600 + 59);
        book.apply(seq, now, &stop).unwrap();
        assert!(
            book.key(1000, "k", now).is_some(),
            "a retry {hours} h after the keyed call would run it again"
        );
    }
    let past = at(24 * 3600 + 120);
    book.apply(6, past, &stop).unwrap();
    assert!(book.key(1000, "k", past).is_none(), "kept past its day");
    assert_eq!(book.sizes().1, 0, "the idempotency key is dropped");
}

#[test]
fn ended_proposals_keys_and_old_runs_leave_the_book_after_their_retention() {
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let at = |secs: u64| t0 + Duration::from_secs(secs);
    let by = Decider { uid: 5, user: None };
    let mut keyed = proposal(2);
    keyed.idempotency_key = Some("k".into());
    let mut events: Vec<(u64, SystemTime, Event)> = vec![
        (1, at(0), created(1)),
        (
            2,
            at(1),
            Event::ProposalDenied {
                id: 1,
                by: by.clone(),
                reason: crate::events::Bounded::new("no"),
            },
        ),
        (
            3,
            at(2),
            Event::ProposalCreated {
                id: 2,
                proposal: Box::new(keyed),
            },
        ),
        (4, at(3), created(3)),
        (
            5,
            at(4),
            Event::ProposalApproved {
                id: 3,
                by: by.clone(),
                hash: String::new(),
                role: None,
            },
        ),
        (6, at(5), exec(Some(3))),
        (7, at(6), Event::ProposalUnknownOutcome { id: 3 }),
    ];
    // The journal's open exec of proposal 3 ends with a start.
    events.push((
        8,
        at(7),
        Event::Start {
            version: String::new(),
            policy: String::new(),
            policy_hash: String::new(),
            pid: 1,
            uid: 0,
        },
    ));
    let (mut book, conflicts) = Book::replay(events);
    assert!(conflicts.is_empty(), "{conflicts:?}");
    assert_eq!(book.sizes().0, 3);
    assert!(book.key(1000, "k", at(8)).is_some());
    let snapshot: BookSnapshot =
        serde_json::from_value(book.snapshot_state()).expect("the snapshot reads back");
    let mut restored = Book::from_snapshot(snapshot).unwrap();
    assert_eq!(restored, book, "a snapshot restores the book exactly");
    // A day and a bit later any event prunes: the denied proposal and the key are gone,
    // the pending one stays (it is not ended) and so does the unknown outcome.
    let later = at(IDEMPOTENCY_WINDOW.as_secs() + 120);
    let stop = Event::Stop {
        reason: String::new(),
        in_flight: 0,
    };
    book.apply(9, later, &stop).unwrap();
    restored.apply(9, later, &stop).unwrap();
    assert_eq!(restored, book);
    assert!(
        book.get(1).is_none(),
        "an ended proposal past its retention is dropped"
    );
    assert!(book.get(2).is_some(), "a pending proposal stays");
    assert_eq!(book.get(3).unwrap().state, State::UnknownOutcome);
    assert_eq!(book.sizes().1, 0, "the idempotency key is dropped");
    assert_eq!(book.next_id(), 4, "ids are never reused");
    // Run history keeps at most MAX_RATE_COUNT runs per verb and caller, and counts right.
    let mut runs = Book::new();
    for n in 0..(MAX_RATE_COUNT as u64 + 50) {
        let mut e = exec(None);
        if let Event::Exec { decision, .. } = &mut e {
            *decision = RunDecision::Run;
        }
        runs.apply(n + 1, later + Duration::from_millis(n), &e)
            .unwrap();
        runs.apply(
            n + 1,
            later + Duration::from_millis(n),
            &Event::Result {
                verb: "scale".into(),
                exec_seq: n + 1,
                proposal: None,
                exit_code: Some(0),
                signal: None,
                timed_out: false,
                duration_ms: 0,
                stdout: crate::events::OutputRecord {
                    bytes: 0,
                    kept: 0,
                    truncated: false,
                    sha256: String::new(),
                },
                stderr: crate::events::OutputRecord {
                    bytes: 0,
                    kept: 0,
                    truncated: false,
                    sha256: String::new(),
                },
                error: None,
                ended_by: None,
            },
        )
        .unwrap();
    }
    assert_eq!(runs.sizes().2, MAX_RATE_COUNT as usize);
    let now = later + Duration::from_secs(60);
    let rate = |count| {
        Some(Rate {
            count,
            per: Duration::from_secs(3600),
        })
    };
    assert!(
        runs.rate_exceeded("scale", 1000, rate(MAX_RATE_COUNT), None, now)
            .is_some()
    );
    assert!(
        runs.rate_exceeded("scale", 1000, None, rate(MAX_RATE_COUNT), now)
            .is_some()
    );
    assert!(
        runs.rate_exceeded("scale", 1001, rate(1), None, now)
            .is_none()
    );
    // Past the rate history the runs leave the book at the next event, whatever their count.
    let past = later + RATE_HISTORY + Duration::from_secs(120);
    runs.apply(
        MAX_RATE_COUNT as u64 + 51,
        past,
        &Event::Stop {
            reason: String::new(),
            in_flight: 0,
        },
    )
    .unwrap();
    assert_eq!(runs.sizes().2, 0, "runs older than the rate history stay");
}
