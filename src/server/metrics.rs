//! The daemon's counters for `status` (see `crate::status` for what is reported and to whom):
//! counted where the thing happens — every `call` answer in `dispatch`, every journaled refusal
//! by its rule, every approval decision, every `busy` — and read together with the ledger's
//! state (proposals, book sizes, the journal's size and growth) when `status` is asked.
//!
//! Invariants: counters only grow while the daemon runs (a restart starts them at zero, as
//! Prometheus expects of counters); a label is a verb the policy declares or one of a fixed set,
//! never text from a request.
#![forbid(unsafe_code)]

use super::{Context, Daemon};
use crate::policy::{Refusal, RoleKind};
use crate::proposal::State;
use crate::protocol::Response;
use crate::status::{
    APPROVAL_LATENCY_BUCKETS, CALL_LATENCY_BUCKETS, CallCount, CallerStatus, Histogram,
    JournalStatus, Metrics, Status,
};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The label of a verb name the policy does not declare.
pub const UNKNOWN_VERB: &str = "(unknown)";

struct Counters {
    calls: BTreeMap<(String, &'static str), u64>,
    call_latency: Histogram,
    refusals: BTreeMap<&'static str, u64>,
    decisions: BTreeMap<&'static str, u64>,
    approval_latency: Histogram,
    busy: BTreeMap<&'static str, u64>,
    credentials: BTreeMap<&'static str, u64>,
}

/// Counters since the start.
pub(super) struct Counted {
    started: Instant,
    started_at: SystemTime,
    counters: Mutex<Counters>,
}

impl Default for Counted {
    fn default() -> Counted {
        Counted {
            started: Instant::now(),
            started_at: SystemTime::now(),
            counters: Mutex::new(Counters {
                calls: BTreeMap::new(),
                call_latency: Histogram::new(CALL_LATENCY_BUCKETS),
                refusals: BTreeMap::new(),
                decisions: BTreeMap::new(),
                approval_latency: Histogram::new(APPROVAL_LATENCY_BUCKETS),
                busy: BTreeMap::new(),
                credentials: BTreeMap::new(),
            }),
        }
    }
}

/// How a `call` was answered, as a label.
fn outcome(response: &Response) -> &'static str {
    match response {
        Response::Ok { result, .. } if result.exit.timed_out => "timed_out",
        Response::Ok { result, .. } if result.exit.code == Some(0) => "ok",
        // A stream that reached its bound ended as it should.
        Response::Ok { result, .. } if result.ended_by.is_some() => "ok",
        Response::Ok { .. } => "failed",
        Response::Invalid { .. } => "invalid",
        Response::Denied { .. } => "denied",
        Response::ConfirmRequired { .. } => "proposed",
        Response::Busy { .. } => "busy",
        Response::Proposals { .. } => "replayed",
        Response::Error { .. } => "error",
        Response::Verbs { .. }
        | Response::Chunk { .. }
        | Response::Check { .. }
        | Response::Command { .. }
        | Response::Decided { .. }
        | Response::Queued { .. }
        | Response::Info { .. } => "other",
    }
}

/// The rule a refusal is counted under.
pub(super) fn refusal_rule(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::NotAvailable { .. } => "not_available",
        Refusal::UnknownParam { .. } => "unknown_parameter",
        Refusal::Missing { .. } => "missing",
        Refusal::Invalid(rejection) => rejection.rule,
        Refusal::Headless { .. } => "headless",
        Refusal::Denied { .. } => "denied",
    }
}

impl Counted {
    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().expect("metrics lock")
    }

    /// A `call` answered after `took`; `verb` is already a label (declared, or [`UNKNOWN_VERB`]).
    pub(super) fn call(&self, verb: &str, response: &Response, took: Duration) {
        let mut counters = self.counters();
        *counters
            .calls
            .entry((verb.to_string(), outcome(response)))
            .or_default() += 1;
        counters.call_latency.observe(took.as_secs_f64());
        if let Response::Busy { .. } = response {
            *counters.busy.entry("executions").or_default() += 1;
        }
    }

    /// A per-call database role event: `minting`, `minted`, `mint_failed`, `dropped`,
    /// `drop_failed`.
    pub(super) fn credential(&self, event: &'static str) {
        *self.counters().credentials.entry(event).or_default() += 1;
    }

    /// One refusal of `rule` (journaled in full or coalesced).
    pub(super) fn refused(&self, rule: &'static str) {
        *self.counters().refusals.entry(rule).or_default() += 1;
    }

    /// A decision on a proposal created at `created_ms` (Unix ms); `approved` or `denied` count
    /// towards the approval latency, `expired` does not (nobody decided).
    pub(super) fn decided(&self, decision: &'static str, created_ms: u64) {
        let mut counters = self.counters();
        *counters.decisions.entry(decision).or_default() += 1;
        if decision != "expired" {
            let now = crate::approvals::unix_ms(SystemTime::now());
            let seconds = now.saturating_sub(created_ms) as f64 / 1000.0;
            counters.approval_latency.observe(seconds);
        }
    }

    /// A connection answered `busy` because every connection slot was taken.
    pub fn connection_busy(&self) {
        *self.counters().busy.entry("connections").or_default() += 1;
    }
}

fn owned(map: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
    map.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

impl Daemon {
    /// Count a journaled decision on proposal `id`.
    pub(super) fn count_decision(&self, id: u64, decision: &'static str) {
        if let Some(created_ms) = self.ledger.read(|b| b.get(id).map(|p| p.created_ms)) {
            self.counted.decided(decision, created_ms);
        }
    }

    /// The label of `verb` for the call counters.
    pub(super) fn verb_label<'a>(&self, ctx: &Context, verb: &'a str) -> &'a str {
        if ctx.prepared.policy.verbs.contains_key(verb) {
            verb
        } else {
            UNKNOWN_VERB
        }
    }

    /// The answer to `status`: identity for everyone, the counters for callers whose roles are
    /// all human.
    pub(super) async fn status(&self, ctx: &Context) -> Response {
        let policy = &ctx.prepared.policy;
        let human = !ctx.roles.is_empty() && ctx.roles.iter().all(|r| r.kind == RoleKind::Human);
        let metrics = if human {
            Some(self.metrics_now(ctx).await)
        } else {
            None
        };
        let status = Status {
            version: env!("CARGO_PKG_VERSION").into(),
            policy: policy.origin.clone(),
            policy_hash: policy.hash.clone(),
            caller: CallerStatus {
                uid: ctx.caller.uid,
                user: ctx.caller.user.clone(),
                roles: ctx.record.roles.clone(),
            },
            metrics,
        };
        Response::Info {
            info: serde_json::to_value(status).expect("a status always serializes"),
        }
    }

    async fn metrics_now(&self, ctx: &Context) -> Metrics {
        let daemon_cfg = &ctx.prepared.policy.daemon;
        let journal = {
            let ledger = self.ledger.journal_handle();
            tokio::task::spawn_blocking(move || ledger.lock().expect("journal lock").stats())
                .await
                .expect("journal stats task panicked")
        };
        let (proposals, sizes) = self.ledger.read(|book| {
            let mut states = BTreeMap::new();
            for state in [
                State::Pending,
                State::Approved,
                State::Executing,
                State::UnknownOutcome,
            ] {
                states.insert(state.as_str().to_string(), 0u64);
            }
            for proposal in book.all() {
                if let Some(count) = states.get_mut(proposal.state.as_str()) {
                    *count += 1;
                }
            }
            (states, book.sizes())
        });
        let owed = self
            .ledger
            .read(|book| book.credentials_owed().count() as u64);
        let counted = &self.counted;
        let counters = counted.counters();
        Metrics {
            uptime_seconds: counted.started.elapsed().as_secs_f64(),
            started_at: crate::journal::format_rfc3339(counted.started_at),
            calls: counters
                .calls
                .iter()
                .map(|((verb, outcome), count)| CallCount {
                    verb: verb.clone(),
                    outcome: outcome.to_string(),
                    count: *count,
                })
                .collect(),
            call_latency_seconds: counters.call_latency.clone(),
            refusals: owned(&counters.refusals),
            refusals_coalescing: self.refusals_held(),
            proposals,
            decisions: owned(&counters.decisions),
            approval_latency_seconds: counters.approval_latency.clone(),
            busy: owned(&counters.busy),
            credentials: {
                let mut credentials = owned(&counters.credentials);
                credentials.insert("owed".to_string(), owed);
                credentials
            },
            connections_in_flight: self.agent_pool.in_use().0 + self.approver_pool.in_use().0,
            waits_parked: self.agent_pool.in_use().1 + self.approver_pool.in_use().1,
            busy_paced: self.pacer.held(),
            max_busy_paced: self.pacer.budget(),
            max_connections: daemon_cfg.max_connections,
            executions_in_flight: self.executions_in_flight(),
            max_executions: daemon_cfg.max_executions,
            journal: JournalStatus {
                bytes: journal.bytes,
                segments: journal.segments,
                live_segment_bytes: journal.live_segment_bytes,
                last_seq: journal.last_seq,
                epoch: journal.epoch,
                key_custody: journal.key_custody.to_string(),
                appended_records: journal.appended_records,
                appended_bytes: journal.appended_bytes,
                record_syncs: journal.record_syncs,
                bytes_last_minute: journal.bytes_last_minute,
                witness: serde_json::to_value(journal.witness)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                journald_failures: journal.journald_failures,
            },
            state: BTreeMap::from([
                ("proposals".to_string(), sizes.0 as u64),
                ("idempotency_keys".to_string(), sizes.1 as u64),
                ("runs".to_string(), sizes.2 as u64),
                (
                    "kept_outputs".to_string(),
                    self.ledger.kept_outputs() as u64,
                ),
            ]),
        }
    }
}
