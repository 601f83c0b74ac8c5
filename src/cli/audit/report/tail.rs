//! `verbd audit tail`: the last records, optionally only those of a verb, a caller, an outcome or
//! a time on, and with `--follow` every record journaled from then on, each verified as it comes
//! (`journal::Follower`).
//!
//! A record belongs to a verb or a caller when it names it (`verb`, `caller`, a proposal's
//! `verb` and `requester`), or when it continues one that did: a `result`, `cancelled` or
//! `file_write` continues its `exec` record (`exec_seq`), a `proposal_*` record its
//! `proposal_created` (`id`). Records before the point the tail starts reading from (the last
//! seal's checkpoint, when it holds enough matching records) are not seen, so a continuation of
//! one of them is attributed only by what it names itself.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::AuditError;
use verbd::exit::EXIT_SUCCESS;
use verbd::journal::{self, Follower, Record};

/// How often `--follow` looks for new records.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// What a record says happened, for `--outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordOutcome {
    /// A run that exited 0 (`result`)
    Succeeded,
    /// A run that exited otherwise, timed out, was killed or cancelled, or never started
    /// (`result`, `cancelled`, `proposal_not_started`, `proposal_unknown_outcome`)
    Failed,
    /// A call, connection, check or approval the daemon refused (`refused`, `connect_refused`,
    /// `approval_refused`, a `check` not allowed, `refusals_coalesced`)
    Refused,
    /// A proposal made (`proposal_created`)
    Proposed,
    /// A proposal a human approved (`proposal_approved`)
    Approved,
    /// A proposal a human denied (`proposal_denied`)
    Denied,
    /// A proposal nobody decided in time (`proposal_expired`)
    Expired,
}

impl RecordOutcome {
    /// The outcome `event` records, if it records one.
    fn of(event: &Value) -> Option<RecordOutcome> {
        Some(match event["kind"].as_str()? {
            "result" => {
                let clean = event["exit_code"].as_i64() == Some(0)
                    && event["timed_out"] != true
                    && event["signal"].is_null()
                    && event["error"].is_null();
                if clean {
                    RecordOutcome::Succeeded
                } else {
                    RecordOutcome::Failed
                }
            }
            "cancelled" | "proposal_not_started" | "proposal_unknown_outcome" => {
                RecordOutcome::Failed
            }
            "refused" | "connect_refused" | "approval_refused" | "refusals_coalesced" => {
                RecordOutcome::Refused
            }
            "check" if event["allowed"] == false => RecordOutcome::Refused,
            "proposal_created" => RecordOutcome::Proposed,
            "proposal_approved" => RecordOutcome::Approved,
            "proposal_denied" => RecordOutcome::Denied,
            "proposal_expired" => RecordOutcome::Expired,
            _ => return None,
        })
    }
}

/// Who a caller filter names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerFilter {
    Uid(u32),
    /// A user name: its uid on this host when it has one, and records that name it.
    User {
        name: String,
        uid: Option<u32>,
    },
}

impl CallerFilter {
    /// `1000` or `alice`.
    pub fn parse(text: &str) -> CallerFilter {
        match text.parse::<u32>() {
            Ok(uid) => CallerFilter::Uid(uid),
            Err(_) => CallerFilter::User {
                name: text.to_string(),
                uid: nix::unistd::User::from_name(text)
                    .ok()
                    .flatten()
                    .map(|u| u.uid.as_raw()),
            },
        }
    }

    fn matches(&self, uid: Option<u64>, user: Option<&str>) -> bool {
        match self {
            CallerFilter::Uid(wanted) => uid == Some(u64::from(*wanted)),
            CallerFilter::User { name, uid: known } => {
                user == Some(name.as_str()) || known.is_some_and(|k| uid == Some(u64::from(k)))
            }
        }
    }
}

/// The filters of `audit tail`; all given ones must match.
#[derive(Debug, Default)]
pub struct TailFilter {
    pub verb: Option<String>,
    pub caller: Option<CallerFilter>,
    pub outcome: Option<RecordOutcome>,
    /// Records at or after this time.
    pub since: Option<SystemTime>,
}

impl TailFilter {
    /// `--since`: an RFC 3339 time (`2026-12-01T08:00:00Z`) or an age (`30m`, `2h`, `1d`).
    pub fn parse_since(text: &str) -> Result<SystemTime, AuditError> {
        if let Some(time) = journal::parse_rfc3339(text) {
            return Ok(time);
        }
        let age = verbd::policy::units::parse_duration(text).map_err(|e| {
            AuditError::Usage(format!(
                "--since {text:?}: not an RFC 3339 time (2026-12-01T08:00:00Z) nor an age ({e})"
            ))
        })?;
        Ok(SystemTime::now()
            .checked_sub(age)
            .unwrap_or(SystemTime::UNIX_EPOCH))
    }
}

/// Who and what each `exec` and `proposal_created` seen was about, so the records that continue
/// them match the same filters.
#[derive(Default)]
struct Threads {
    /// `exec` record seq → (verb, caller uid, caller user).
    execs: HashMap<u64, (String, Option<u64>, Option<String>)>,
    /// proposal id → (verb, requester uid, requester user).
    proposals: HashMap<u64, (String, Option<u64>, Option<String>)>,
}

impl Threads {
    /// The verb and caller of `record`: its own, else those of the record it continues.
    fn subject(&mut self, record: &Record) -> (Option<String>, Option<u64>, Option<String>) {
        let event = &record.event;
        let text = |v: &Value| v.as_str().map(str::to_string);
        let own = (
            text(&event["verb"]).or_else(|| text(&event["proposal"]["verb"])),
            event["caller"]["uid"]
                .as_u64()
                .or_else(|| event["proposal"]["requester"]["uid"].as_u64()),
            text(&event["caller"]["user"])
                .or_else(|| text(&event["proposal"]["requester"]["user"])),
        );
        match event["kind"].as_str() {
            Some("exec") => {
                self.execs.insert(
                    record.seq,
                    (own.0.clone().unwrap_or_default(), own.1, own.2.clone()),
                );
            }
            Some("proposal_created") => {
                if let Some(id) = event["id"].as_u64() {
                    self.proposals.insert(
                        id,
                        (own.0.clone().unwrap_or_default(), own.1, own.2.clone()),
                    );
                }
            }
            _ => {}
        }
        let continued = event["exec_seq"]
            .as_u64()
            .and_then(|seq| self.execs.get(&seq))
            .or_else(|| {
                let kind = event["kind"].as_str().unwrap_or("");
                let id = event["proposal"].as_u64().or_else(|| {
                    (kind.starts_with("proposal_") || kind == "approval_refused")
                        .then(|| event["id"].as_u64())
                        .flatten()
                });
                id.and_then(|id| self.proposals.get(&id))
            })
            .cloned();
        match continued {
            Some((verb, uid, user)) => (own.0.or(Some(verb)), own.1.or(uid), own.2.or(user)),
            None => own,
        }
    }
}

/// The filter with its memory of the records it has seen.
struct Matcher {
    filter: TailFilter,
    threads: Threads,
}

impl Matcher {
    fn wants(&mut self, record: &Record) -> bool {
        let (verb, uid, user) = self.threads.subject(record);
        let filter = &self.filter;
        filter
            .verb
            .as_ref()
            .is_none_or(|v| verb.as_ref() == Some(v))
            && filter
                .caller
                .as_ref()
                .is_none_or(|c| c.matches(uid, user.as_deref()))
            && filter
                .outcome
                .is_none_or(|o| RecordOutcome::of(&record.event) == Some(o))
            && filter.since.is_none_or(|since| {
                journal::parse_rfc3339(&record.time).is_some_and(|time| time >= since)
            })
    }
}

fn print(record: &Record, json: bool, out: &mut dyn Write) -> Result<(), AuditError> {
    let line = if json {
        serde_json::to_string(record)?
    } else {
        journal::format_record(record)
    };
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|source| AuditError::Io {
            what: "printing".to_owned(),
            source,
        })
}

/// `audit tail`: the last `n` records the filter accepts; with `follow`, then every new one as it
/// is journaled and verified, until the process is stopped or the journal shows a problem (the
/// error names it: nothing after an altered record is shown).
pub fn tail(
    state_dir: &Path,
    n: usize,
    json: bool,
    filter: TailFilter,
    follow: bool,
    out: &mut dyn Write,
) -> Result<u8, AuditError> {
    let mut matcher = Matcher {
        filter,
        threads: Threads::default(),
    };
    let (mut follower, records) = Follower::start(state_dir, n, &mut |r| matcher.wants(r))?;
    for record in &records {
        print(record, json, out)?;
    }
    if !follow {
        return Ok(EXIT_SUCCESS);
    }
    loop {
        std::thread::sleep(FOLLOW_INTERVAL);
        for record in follower.poll(&mut |r| matcher.wants(r))? {
            print(&record, json, out)?;
        }
    }
}
