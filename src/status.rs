//! What `verbd status` reports, as one typed shape the daemon fills and the client prints: as
//! text for a person, as JSON, or in Prometheus' text exposition format (version 0.0.4) for
//! node_exporter's textfile collector.
//!
//! Who sees what: every caller with a role gets the daemon's identity ([`Status`] without
//! `metrics`); the counters ([`Metrics`]: calls, refusals, approvals, limits, the journal) go only
//! to callers whose roles are all of kind `human` (people and their tools, such as the metrics
//! timer's user), never to an agent: they tell what other callers do and how fast humans answer.
//!
//! Invariants: label values come from the policy (verb names) or from fixed sets (outcomes,
//! refusal rules, limits), never from a request, so no caller can grow the number of series;
//! histograms have fixed buckets.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Upper bounds (seconds) of the call latency buckets.
pub const CALL_LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Upper bounds (seconds) of the propose → decision buckets.
pub const APPROVAL_LATENCY_BUCKETS: &[f64] = &[
    5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
];

/// The answer to `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    pub version: String,
    /// Where the policy came from, and its hash.
    pub policy: String,
    pub policy_hash: String,
    /// Who asked, as the daemon sees them.
    pub caller: CallerStatus,
    /// The counters, for callers whose roles are all human; `None` for an agent (which learns
    /// nothing daemon-wide: not even how many verbs run now, which tells another caller's
    /// activity and, when an approved run starts, that a human is at the keyboard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerStatus {
    pub uid: u32,
    pub user: Option<String>,
    pub roles: Vec<String>,
}

/// The daemon's counters since it started, and its state now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub uptime_seconds: f64,
    pub started_at: String,
    /// `call` requests answered, by verb (`(unknown)` for a name the policy does not declare)
    /// and outcome.
    pub calls: Vec<CallCount>,
    /// Time from a `call` request to its answer.
    pub call_latency_seconds: Histogram,
    /// Refusals by rule (`not_available`, `unknown_parameter`, `missing`, a parameter rule such as
    /// `pattern`, `headless`, `denied`, `connect_refused`, `check_denied`, `approval_refused`).
    pub refusals: BTreeMap<String, u64>,
    /// Refusals counted in open coalescing windows, journaled when their window ends.
    pub refusals_coalescing: u64,
    /// Proposals now: `pending` a decision, `approved` and waiting to run or running
    /// (`approved`, `executing`), `unknown_outcome` waiting for an operator.
    pub proposals: BTreeMap<String, u64>,
    /// Decisions since the start: `approved`, `denied`, `expired`.
    pub decisions: BTreeMap<String, u64>,
    /// Time from a proposal's creation to a human's approval or denial.
    pub approval_latency_seconds: Histogram,
    /// `busy` answers since the start, by the limit reached (`connections`, `executions`).
    pub busy: BTreeMap<String, u64>,
    /// Per-call database roles since the start (`minting`, `minted`, `mint_failed`, `dropped`,
    /// `drop_failed`), and `owed`: minted and not dropped now (in use, or left for the next
    /// start to drop).
    #[serde(default)]
    pub credentials: BTreeMap<String, u64>,
    /// Connections being read or answered now, on both sockets.
    pub connections_in_flight: usize,
    /// `wait`s parked now (they hold no connection place), on both sockets.
    pub waits_parked: usize,
    /// Refused connections held now, unread, for a paced `busy` answer (a uid refused faster
    /// than [`crate::server::pacing::ANSWERED_AT_ONCE`] a second), and the most held at once.
    pub busy_paced: usize,
    pub max_busy_paced: usize,
    pub max_connections: usize,
    /// Verb executions running now, of every caller.
    pub executions_in_flight: usize,
    pub max_executions: usize,
    pub journal: JournalStatus,
    /// What the proposal book holds: `proposals`, `idempotency_keys`, `runs` (rate history);
    /// and `kept_outputs`, run outputs kept for `result`.
    pub state: BTreeMap<String, u64>,
}

/// One (verb, outcome) counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallCount {
    pub verb: String,
    pub outcome: String,
    pub count: u64,
}

/// The journal's size and growth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalStatus {
    pub bytes: u64,
    pub segments: u64,
    pub live_segment_bytes: u64,
    pub last_seq: u64,
    pub epoch: u64,
    pub key_custody: String,
    pub appended_records: u64,
    pub appended_bytes: u64,
    pub record_syncs: u64,
    pub bytes_last_minute: u64,
    pub witness: String,
    pub journald_failures: u64,
}

/// A histogram with fixed buckets: `counts[i]` observations were at most `bounds[i]` (and above
/// the bound before); the last count is above every bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }

    /// The upper bound of the bucket holding quantile `q` (0 < q ≤ 1): the value is at most
    /// this. `None` without observations; infinity when it is above every bound.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let wanted = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted {
                return Some(self.bounds.get(index).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

/// A label value as the exposition format writes it (`\`, `"` and newline escaped).
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample value: integers as integers, `+Inf` for infinity.
fn number(value: f64) -> String {
    if value.is_infinite() {
        "+Inf".into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP verbd_{name} {help}");
        let _ = writeln!(self.out, "# TYPE verbd_{name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.out, "verbd_{name}");
        if !labels.is_empty() {
            let rendered: Vec<String> = labels
                .iter()
                .map(|(key, value)| format!("{key}=\"{}\"", label(value)))
                .collect();
            let _ = write!(self.out, "{{{}}}", rendered.join(","));
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    fn counter(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn labelled(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        key: &str,
        values: &BTreeMap<String, u64>,
    ) {
        self.family(name, kind, help);
        for (value, count) in values {
            self.sample(name, &[(key, value)], *count as f64);
        }
    }

    fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) {
        self.family(name, "histogram", help);
        let mut cumulative = 0;
        for (index, count) in histogram.counts.iter().enumerate() {
            cumulative += count;
            let bound = histogram
                .bounds
                .get(index)
                .map_or("+Inf".to_string(), |b| number(*b));
            self.sample(
                &format!("{name}_bucket"),
                &[("le", &bound)],
                cumulative as f64,
            );
        }
        self.sample(&format!("{name}_sum"), &[], histogram.sum);
        self.sample(&format!("{name}_count"), &[], histogram.count as f64);
    }
}

/// `status` in Prometheus' text exposition format. `verbd_up` is 1 (a client that cannot reach
/// the daemon writes [`down_exposition`] instead); the counters appear when `metrics` is there.
pub fn render_prometheus(status: &Status) -> String {
    let mut e = Exposition { out: String::new() };
    e.gauge("up", "1 when verbd answered the status request.", 1.0);
    e.family(
        "info",
        "gauge",
        "The daemon's version and the hash of the policy in force.",
    );
    e.sample(
        "info",
        &[
            ("version", &status.version),
            ("policy_hash", &status.policy_hash),
        ],
        1.0,
    );
    let Some(m) = &status.metrics else {
        return e.out;
    };
    e.gauge(
        "executions_in_flight",
        "Verb executions running now.",
        m.executions_in_flight as f64,
    );
    e.gauge(
        "uptime_seconds",
        "Seconds since the daemon started serving.",
        m.uptime_seconds,
    );
    e.family(
        "calls_total",
        "counter",
        "Call requests answered, by verb and outcome.",
    );
    for call in &m.calls {
        e.sample(
            "calls_total",
            &[("verb", &call.verb), ("outcome", &call.outcome)],
            call.count as f64,
        );
    }
    e.histogram(
        "call_duration_seconds",
        "Time from a call request to its answer.",
        &m.call_latency_seconds,
    );
    e.labelled(
        "refusals_total",
        "counter",
        "Refusals by rule.",
        "rule",
        &m.refusals,
    );
    e.gauge(
        "refusals_coalescing",
        "Refusals counted in open coalescing windows, not journaled yet.",
        m.refusals_coalescing as f64,
    );
    e.labelled(
        "proposals",
        "gauge",
        "Proposals now, by state.",
        "state",
        &m.proposals,
    );
    e.labelled(
        "approval_decisions_total",
        "counter",
        "Approval decisions since the start.",
        "decision",
        &m.decisions,
    );
    e.histogram(
        "approval_latency_seconds",
        "Time from a proposal's creation to a human's approval or denial.",
        &m.approval_latency_seconds,
    );
    e.labelled(
        "busy_total",
        "counter",
        "Busy answers, by the limit reached.",
        "limit",
        &m.busy,
    );
    e.labelled(
        "credentials",
        "gauge",
        "Per-call database roles: events since the start, and owed (minted, not dropped) now.",
        "event",
        &m.credentials,
    );
    e.gauge(
        "connections_in_flight",
        "Connections being served now.",
        m.connections_in_flight as f64,
    );
    e.gauge(
        "waits_parked",
        "Waits parked now (they hold no connection place).",
        m.waits_parked as f64,
    );
    e.gauge(
        "busy_paced",
        "Refused connections held now for a paced busy answer.",
        m.busy_paced as f64,
    );
    e.gauge(
        "max_connections",
        "The connection limit.",
        m.max_connections as f64,
    );
    e.gauge(
        "max_executions",
        "The execution limit.",
        m.max_executions as f64,
    );
    let j = &m.journal;
    e.gauge(
        "journal_bytes",
        "Bytes in all journal segments.",
        j.bytes as f64,
    );
    e.gauge(
        "journal_segments",
        "Journal segment files.",
        j.segments as f64,
    );
    e.gauge(
        "journal_last_seq",
        "Sequence number of the last journal record.",
        j.last_seq as f64,
    );
    e.gauge(
        "journal_growth_bytes_last_minute",
        "Bytes appended to the journal in the last 60 seconds.",
        j.bytes_last_minute as f64,
    );
    e.counter(
        "journal_appended_records_total",
        "Journal records appended since the start.",
        j.appended_records as f64,
    );
    e.counter(
        "journal_syncs_total",
        "fdatasyncs that made journal records durable since the start.",
        j.record_syncs as f64,
    );
    e.counter(
        "journald_failures_total",
        "Journal records that could not be sent to journald.",
        j.journald_failures as f64,
    );
    e.labelled(
        "state_entries",
        "gauge",
        "What the proposal book and the output cache hold.",
        "kind",
        &m.state,
    );
    e.out
}

/// What a metrics file says when the daemon did not answer.
pub fn down_exposition() -> String {
    let mut e = Exposition { out: String::new() };
    e.gauge("up", "1 when verbd answered the status request.", 0.0);
    e.out
}

/// `status` for a person (a user name from the user database is escaped; everything else comes
/// from the policy or the daemon).
pub fn render_text(status: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "verbd {}  policy {} ({})",
        status.version,
        status.policy,
        short(&status.policy_hash)
    );
    let _ = writeln!(
        out,
        "caller uid {} {} roles: {}",
        status.caller.uid,
        crate::terminal::escape(status.caller.user.as_deref().unwrap_or("(no user name)")),
        status.caller.roles.join(", ")
    );
    let Some(m) = &status.metrics else {
        let _ = writeln!(
            out,
            "(counters are shown to callers whose roles are all human)"
        );
        return out;
    };
    let _ = writeln!(out, "up {:.0}s since {}", m.uptime_seconds, m.started_at);
    let _ = writeln!(out, "calls:");
    for call in &m.calls {
        let _ = writeln!(
            out,
            "  {:<24} {:<16} {}",
            call.verb, call.outcome, call.count
        );
    }
    let quantiles = |h: &Histogram| match (h.quantile_bound(0.5), h.quantile_bound(0.9)) {
        (Some(p50), Some(p90)) => format!(
            "p50 ≤ {}s, p90 ≤ {}s over {}",
            number(p50),
            number(p90),
            h.count
        ),
        _ => "none yet".into(),
    };
    let _ = writeln!(out, "call latency: {}", quantiles(&m.call_latency_seconds));
    let _ = writeln!(
        out,
        "refusals: {} (+{} being coalesced)",
        pairs(&m.refusals),
        m.refusals_coalescing
    );
    let _ = writeln!(out, "proposals: {}", pairs(&m.proposals));
    let _ = writeln!(
        out,
        "decisions: {}; latency {}",
        pairs(&m.decisions),
        quantiles(&m.approval_latency_seconds)
    );
    let _ = writeln!(
        out,
        "busy: {}; {} paced now (at most {}); connections {}/{}, executions {}/{}",
        pairs(&m.busy),
        m.busy_paced,
        m.max_busy_paced,
        m.connections_in_flight,
        m.max_connections,
        m.executions_in_flight,
        m.max_executions
    );
    if !m.credentials.is_empty() {
        let _ = writeln!(out, "per-call database roles: {}", pairs(&m.credentials));
    }
    let j = &m.journal;
    let _ = writeln!(
        out,
        "journal: {} bytes in {} segment(s), last seq {}, {} bytes in the last minute; witness {}; key {}",
        j.bytes, j.segments, j.last_seq, j.bytes_last_minute, j.witness, j.key_custody
    );
    let _ = writeln!(out, "state: {}", pairs(&m.state));
    out
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

fn pairs(values: &BTreeMap<String, u64>) -> String {
    if values.is_empty() {
        return "none".into();
    }
    values
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_bounds() {
        let mut h = Histogram::new(&[1.0, 2.0, 5.0]);
        assert_eq!(h.quantile_bound(0.5), None);
        for value in [0.5, 0.7, 1.5, 4.0, 9.0] {
            h.observe(value);
        }
        assert_eq!(h.counts, vec![2, 1, 1, 1]);
        assert_eq!(h.quantile_bound(0.5), Some(2.0));
        assert_eq!(h.quantile_bound(0.9), Some(f64::INFINITY));
        assert_eq!(h.count, 5);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
    }
}
