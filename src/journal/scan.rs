//! Reading the journal back as a stream: segment by segment, line by line, with memory bounded by
//! a fixed window (never by the length of the history). Every line is checked for shape,
//! canonical form and — where a key is at hand — its MAC under the key of the epoch it names;
//! then the relations between authentic records: sequence numbers, the hash chain, epochs and
//! their seals, segment headers, and the heads published to the witness. Classification rules:
//!
//! - A line that fails to parse, is not canonical or fails its MAC is reported once (`BadJson`,
//!   `NotCanonical`, `BadHmac`) and takes no part in the relation checks: a chain break it causes
//!   in its successor is a consequence, not a second finding.
//! - Among authentic records, a seq seen before is a duplicate; a seq lower than the previous
//!   authentic line's is a reordering (a swap of two records is one finding, on the second line).
//! - Seqs absent from every line (authentic or claimed by a faulty line) are deleted records,
//!   reported as one `MissingSeq` per gap on the line where the gap ends.
//! - Each authentic record's `prev` must be the hash of the authentic record with the seq before
//!   it, wherever that record sits; a mismatch is `BrokenChain`.
//! - Epochs run 0, 1, 2, … within a key generation (a `journal_keys` record starts one at 0);
//!   every epoch but the open last one ends with a `journal_seal` record of that epoch; a record
//!   may only carry the epoch that is open at its place. Anything else is `EpochOrder` or
//!   `Unsealed`.
//! - Each head in the witness must match the record with its seq; heads past the journal's end are
//!   records cut off the end (`Truncated`).
//!
//! Relations look back through a window of the last [`WINDOW`] authentic records; a record moved
//! further than that is still reported (as out of order), only less precisely.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use zeroize::Zeroizing;

use super::keys::{EpochKey, Fingerprint, KEY_BYTES, LegacyKey, Slot, fingerprint_of};
use super::record::{MAX_LINE_BYTES, ParsedLine, hex, parse_hex_into, parse_line, sha256};
use super::storage::{Mark, SegmentFile};
use super::witness::{WitnessEntry, WitnessLine, WitnessStream};
use super::{JournalError, Problem, ProblemKind};

/// Authentic records remembered for relation checks.
pub(super) const WINDOW: usize = 16 * 1024;
/// Open gaps and deferred chain checks remembered at once.
const MAX_PENDING: usize = 16 * 1024;
/// Findings kept in full; beyond this they are counted.
const MAX_PROBLEMS: usize = 10_000;

/// Where a line sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Location {
    pub(super) segment: u64,
    pub(super) line: u64,
}

/// What produced a verification key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeySource {
    /// Given by the operator (`--verify-key`).
    Operator,
    /// `journal.key` in the state directory.
    Local,
}

struct GenerationKey {
    fingerprint: Fingerprint,
    k0: Zeroizing<[u8; KEY_BYTES]>,
    source: KeySource,
}

/// The keys a check may use.
#[derive(Default)]
pub(super) struct KeyRing {
    legacy: Option<LegacyKey>,
    generations: Vec<GenerationKey>,
    /// The daemon's current key: proves records of its generation from its epoch on.
    live: Option<Slot>,
}

impl KeyRing {
    pub(super) fn add_k0(&mut self, k0: &[u8; KEY_BYTES], source: KeySource) {
        let fingerprint = fingerprint_of(k0);
        if self
            .generations
            .iter()
            .all(|known| known.fingerprint != fingerprint)
        {
            self.generations.push(GenerationKey {
                fingerprint,
                k0: Zeroizing::new(*k0),
                source,
            });
        }
    }

    /// `journal.key` verifies v1 lines and, as `K0`, a local generation.
    pub(super) fn add_local(&mut self, key: &[u8; KEY_BYTES]) {
        self.legacy = Some(LegacyKey::new(key));
        self.add_k0(key, KeySource::Local);
    }

    pub(super) fn set_live(&mut self, slot: Slot) {
        self.live = Some(slot);
    }

    pub(super) fn has_operator_key(&self) -> bool {
        self.generations
            .iter()
            .any(|known| known.source == KeySource::Operator)
    }

    fn source_of(&self, fingerprint: &Fingerprint) -> Option<KeySource> {
        self.generations
            .iter()
            .find(|known| &known.fingerprint == fingerprint)
            .map(|known| known.source)
    }
}

/// A cache of the last derived epoch key per generation (keys are derived forward from `K0`).
#[derive(Default)]
struct Deriver {
    cached: Option<EpochKey>,
}

impl Deriver {
    /// The key of `epoch` in generation `fingerprint`, if the ring can produce it.
    fn key(&mut self, ring: &KeyRing, fingerprint: &Fingerprint, epoch: u64) -> Option<&EpochKey> {
        let usable = self
            .cached
            .as_ref()
            .is_some_and(|key| key.fingerprint() == fingerprint && key.epoch() <= epoch);
        if !usable {
            self.cached = None;
            if let Some(known) = ring
                .generations
                .iter()
                .find(|known| &known.fingerprint == fingerprint)
            {
                self.cached = Some(EpochKey::initial(&known.k0));
            } else if let Some(live) = &ring.live
                && &live.fingerprint == fingerprint
                && live.epoch <= epoch
            {
                self.cached = Some(live.epoch_key());
            }
        }
        let key = self.cached.as_mut()?;
        key.advance_to(epoch);
        Some(key)
    }
}

/// Where a check starts.
#[derive(Clone, Copy, Debug)]
pub(super) enum Origin {
    /// The first line of the first segment; seq 1 with an all-zero `prev` comes first.
    Beginning,
    /// Just after a known record (a checkpoint): seq and hash of that record.
    After { seq: u64, hash: [u8; 32] },
    /// Somewhere in the middle of a history (an export with `--since`): the first line's `prev`
    /// cannot be checked.
    Unknown,
}

/// The epoch state at one point of the journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct EpochState {
    pub(super) generation: Option<Fingerprint>,
    /// The open (or just sealed) epoch.
    pub(super) epoch: Option<u64>,
    pub(super) sealed: bool,
    /// First seq of the open epoch, when it is known.
    pub(super) first_seq: Option<u64>,
    /// Records in the open epoch so far.
    pub(super) records: u64,
}

/// How far a check got and what it saw, for the report.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    pub(super) lines: u64,
    pub(super) records: u64,
    pub(super) first_seq: Option<u64>,
    pub(super) last_seq: u64,
    /// Records whose MAC verified and whose epoch was sealed, by key source.
    pub(super) proven_operator: u64,
    pub(super) proven_local: u64,
    /// Records of v1 (static key) verified with `journal.key`.
    pub(super) legacy_verified: u64,
    /// Records no key at hand could check.
    pub(super) unproven: u64,
    /// Records whose MAC verified but whose epoch is still open.
    pub(super) unsealed: u64,
    pub(super) sealed_epochs: u64,
    pub(super) generations: Vec<(String, String)>,
    pub(super) witness_heads: u64,
    pub(super) witness_matched: u64,
    pub(super) witness_last: Option<u64>,
    pub(super) unwitnessed: u64,
    pub(super) acknowledged: Vec<String>,
    pub(super) problems_omitted: u64,
    /// Records published to the witness but missing from the end: first, last, last hash.
    pub(super) truncated: Option<(u64, u64, [u8; 32])>,
}

/// A record position as the writer needs it to continue.
#[derive(Clone, Copy, Debug)]
pub(super) struct End {
    pub(super) segment: u64,
    pub(super) line: u64,
    /// Byte offset after the last complete line of the segment.
    pub(super) offset: u64,
    pub(super) seq: u64,
    pub(super) hash: [u8; 32],
    /// Where that last line starts.
    pub(super) last_start: u64,
}

impl End {
    pub(super) fn mark(&self) -> Mark {
        Mark {
            segment: self.segment,
            line: self.line,
            start: self.last_start,
            end: self.offset,
            seq: self.seq,
            hash: self.hash,
        }
    }
}

/// Bytes after the last newline of the live segment: a write that never completed.
#[derive(Clone, Copy, Debug)]
pub(super) struct TornTail {
    pub(super) line: u64,
    pub(super) bytes: u64,
    pub(super) sha256: [u8; 32],
}

struct PendingChain {
    seq: u64,
    prev: [u8; 32],
    location: Location,
}

/// The streaming checker. Feed it lines with [`Checker::feed`], then call [`Checker::finish`].
pub(super) struct Checker {
    keys: KeyRing,
    deriver: Deriver,
    origin: Origin,
    /// Report an epoch left open at the end (strict verification with a key).
    strict_seals: bool,
    previous: Option<(u64, [u8; 32], Location)>,
    max_seq: u64,
    window: HashMap<u64, (Location, [u8; 32])>,
    window_order: VecDeque<u64>,
    gaps: BTreeMap<u64, (u64, Location)>,
    claimed_ahead: BTreeSet<u64>,
    pending_chain: HashMap<u64, PendingChain>,
    pub(super) epochs: EpochState,
    /// Records of the open epoch whose MACs verified, waiting for its seal.
    awaiting_seal: u64,
    awaiting_source: Option<KeySource>,
    expected_segment: Option<u64>,
    segment_needs_header: bool,
    witness: Option<Box<dyn Iterator<Item = WitnessLine>>>,
    witness_peek: Option<WitnessEntry>,
    witness_previous: Option<(u64, u64)>,
    pub(super) problems: Vec<Problem>,
    pub(super) tally: Tally,
    pub(super) end: Option<End>,
    /// The newest `journal_snapshot` record seen.
    pub(super) last_snapshot: Option<Mark>,
}

impl Checker {
    pub(super) fn new(keys: KeyRing, origin: Origin, strict_seals: bool) -> Checker {
        Checker {
            keys,
            deriver: Deriver::default(),
            origin,
            strict_seals,
            previous: None,
            max_seq: match origin {
                Origin::After { seq, .. } => seq,
                _ => 0,
            },
            window: HashMap::new(),
            window_order: VecDeque::new(),
            gaps: BTreeMap::new(),
            claimed_ahead: BTreeSet::new(),
            pending_chain: HashMap::new(),
            epochs: EpochState::default(),
            awaiting_seal: 0,
            awaiting_source: None,
            expected_segment: None,
            segment_needs_header: false,
            witness: None,
            witness_peek: None,
            witness_previous: None,
            problems: Vec::new(),
            tally: Tally::default(),
            end: None,
            last_snapshot: None,
        }
    }

    /// Continues from a known epoch state (the daemon's start-up check from a checkpoint).
    pub(super) fn with_epochs(mut self, epochs: EpochState) -> Checker {
        self.epochs = epochs;
        self
    }

    /// Compares every record with the heads `witness` yields (in file order).
    pub(super) fn with_witness(
        mut self,
        witness: Box<dyn Iterator<Item = WitnessLine>>,
    ) -> Checker {
        self.witness = Some(witness);
        self
    }

    fn report(&mut self, location: Location, seq: Option<u64>, kind: ProblemKind, message: String) {
        if self.problems.len() >= MAX_PROBLEMS {
            self.tally.problems_omitted += 1;
            return;
        }
        self.problems.push(Problem {
            segment: location.segment,
            line: location.line,
            seq,
            kind,
            message,
        });
    }

    /// A new segment file begins. Segment numbers follow each other from 1; every segment after
    /// the first begins with a `journal_segment` header naming its number. `mid_file`: the check
    /// starts inside this segment (at a checkpoint), so neither applies to it.
    pub(super) fn begin_segment(&mut self, segment: &SegmentFile, mid_file: bool) {
        if mid_file {
            self.expected_segment = Some(segment.number + 1);
            return;
        }
        let expected = self.expected_segment.unwrap_or(1);
        if segment.number != expected {
            let missing = if segment.number == expected + 1 {
                format!("segment {expected} is")
            } else {
                format!("segments {expected} to {} are", segment.number - 1)
            };
            self.report(
                Location {
                    segment: segment.number,
                    line: 0,
                },
                None,
                ProblemKind::MissingSegment,
                format!("{missing} missing: a whole segment file was deleted or moved away"),
            );
        }
        self.expected_segment = Some(segment.number + 1);
        self.segment_needs_header = segment.number > 1;
    }

    /// Checks one complete line (without its newline). Returns the parsed line when it is
    /// well-formed and authentic as far as the keys at hand can tell.
    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        location: Location,
        start: u64,
        end: u64,
    ) -> Option<ParsedLine> {
        self.tally.lines += 1;
        let hash = sha256(bytes);
        let verdict = parse_line(bytes, location.segment, location.line);
        let parsed = match verdict {
            Ok(parsed) => parsed,
            Err(fault) => {
                self.fault(location, fault.seq, fault.kind, fault.message);
                self.advance_end(location, start, end, None, hash);
                return None;
            }
        };
        let seq = parsed.record.seq;
        let proof = match self.authenticate(&parsed) {
            Ok(proof) => proof,
            Err((kind, message)) => {
                self.fault(location, Some(seq), kind, message);
                self.advance_end(location, start, end, None, hash);
                return None;
            }
        };
        if !parsed.canonical {
            self.fault(
                location,
                Some(seq),
                ProblemKind::NotCanonical,
                format!(
                    "record seq {seq} was re-formatted (its bytes are not the canonical form the \
                     journal writes; the content still matches its MAC)"
                ),
            );
            self.advance_end(location, start, end, None, hash);
            return None;
        }
        self.relate(&parsed, location, hash);
        self.check_header(&parsed, location);
        self.track_epoch(&parsed, location, proof);
        self.compare_witness(seq, &hash, location);
        if parsed.kind() == "journal_snapshot" {
            self.last_snapshot = Some(Mark {
                segment: location.segment,
                line: location.line,
                start,
                end,
                seq,
                hash,
            });
        }
        self.tally.records += 1;
        self.tally.first_seq.get_or_insert(seq);
        self.tally.last_seq = self.tally.last_seq.max(seq);
        self.advance_end(location, start, end, Some(seq), hash);
        Some(parsed)
    }

    fn advance_end(
        &mut self,
        location: Location,
        start: u64,
        end: u64,
        seq: Option<u64>,
        hash: [u8; 32],
    ) {
        let previous_seq = self.end.map_or(0, |end| end.seq);
        self.end = Some(End {
            segment: location.segment,
            line: location.line,
            offset: end,
            seq: seq.unwrap_or(previous_seq),
            hash,
            last_start: start,
        });
    }

    fn fault(&mut self, location: Location, seq: Option<u64>, kind: ProblemKind, message: String) {
        if let Some(seq) = seq
            && !self.fill_gap(seq)
            && seq > self.max_seq
        {
            self.claimed_ahead.insert(seq);
            if self.claimed_ahead.len() > MAX_PENDING {
                self.claimed_ahead.pop_first();
            }
        }
        self.report(location, seq, kind, message);
    }

    /// The MAC check, under the key of the record's own epoch and generation. Returns which
    /// key proved the record, if any did.
    fn authenticate(
        &mut self,
        parsed: &ParsedLine,
    ) -> Result<Option<KeySource>, (ProblemKind, String)> {
        let seq = parsed.record.seq;
        let forged = || {
            (
                ProblemKind::BadHmac,
                format!("record seq {seq} was altered or forged: its MAC does not match"),
            )
        };
        let Some(epoch) = parsed.epoch() else {
            return match &self.keys.legacy {
                Some(key) if key.verify(parsed.body.as_bytes(), &parsed.tag) => {
                    self.tally.legacy_verified += 1;
                    Ok(None)
                }
                Some(_) => Err(forged()),
                None => {
                    self.tally.unproven += 1;
                    Ok(None)
                }
            };
        };
        let generation = match parsed.kind() {
            "journal_keys" => parse_fingerprint(&parsed.record.event["fingerprint"]),
            "journal_seal" => self
                .epochs
                .generation
                .or_else(|| parse_fingerprint(&parsed.record.event["generation"])),
            _ => self.epochs.generation,
        };
        let generation = match generation {
            Some(generation) => Some(generation),
            None => self.identify_generation(parsed, epoch),
        };
        let key =
            generation.and_then(|generation| self.deriver.key(&self.keys, &generation, epoch));
        let Some(key) = key else {
            self.tally.unproven += 1;
            return Ok(None);
        };
        if !key.verify(parsed.body.as_bytes(), &parsed.tag) {
            return Err(forged());
        }
        let source = generation.and_then(|generation| self.keys.source_of(&generation));
        if source.is_none() {
            // Only the daemon's live key vouched for it: not a proof against its holder.
            self.tally.unproven += 1;
        }
        Ok(source)
    }

    /// For a check that starts in the middle of a generation: the key under which the first
    /// record verifies names its generation.
    fn identify_generation(&mut self, parsed: &ParsedLine, epoch: u64) -> Option<Fingerprint> {
        let candidates: Vec<Fingerprint> = self
            .keys
            .generations
            .iter()
            .map(|known| known.fingerprint)
            .chain(self.keys.live.as_ref().map(|live| live.fingerprint))
            .collect();
        for fingerprint in candidates {
            if let Some(key) = self.deriver.key(&self.keys, &fingerprint, epoch)
                && key.verify(parsed.body.as_bytes(), &parsed.tag)
            {
                self.epochs.generation = Some(fingerprint);
                return Some(fingerprint);
            }
        }
        None
    }

    fn remember(&mut self, seq: u64, location: Location, hash: [u8; 32]) {
        self.window.insert(seq, (location, hash));
        self.window_order.push_back(seq);
        if self.window_order.len() > WINDOW
            && let Some(oldest) = self.window_order.pop_front()
        {
            self.window.remove(&oldest);
        }
    }

    /// Removes `seq` from an open gap; whether it was in one.
    fn fill_gap(&mut self, seq: u64) -> bool {
        let Some((&start, &(end, location))) = self.gaps.range(..=seq).next_back() else {
            return false;
        };
        if seq > end {
            return false;
        }
        self.gaps.remove(&start);
        if start < seq {
            self.gaps.insert(start, (seq - 1, location));
        }
        if seq < end {
            self.gaps.insert(seq + 1, (end, location));
        }
        true
    }

    fn open_gap(&mut self, from: u64, to: u64, location: Location) {
        let mut start = from;
        let claimed: Vec<u64> = self.claimed_ahead.range(from..=to).copied().collect();
        for seq in claimed {
            self.claimed_ahead.remove(&seq);
            if seq > start {
                self.gaps.insert(start, (seq - 1, location));
            }
            start = seq + 1;
        }
        if start <= to {
            self.gaps.insert(start, (to, location));
        }
        while self.gaps.len() > MAX_PENDING {
            if let Some((start, (end, location))) = self.gaps.pop_first() {
                self.report_gap(start, end, location);
            }
        }
    }

    fn report_gap(&mut self, start: u64, end: u64, location: Location) {
        let range = if start == end {
            format!("record seq {start} is")
        } else {
            format!("records seq {start} to {end} are")
        };
        self.report(
            location,
            Some(start),
            ProblemKind::MissingSeq,
            format!("{range} missing before record seq {} (deleted)", end + 1),
        );
    }

    /// Sequence numbers and the hash chain.
    fn relate(&mut self, parsed: &ParsedLine, location: Location, hash: [u8; 32]) {
        let seq = parsed.record.seq;
        if let Some(&(first, _)) = self.window.get(&seq) {
            self.report(
                location,
                Some(seq),
                ProblemKind::DuplicateOrOutOfOrder,
                format!(
                    "record seq {seq} also appears at {}: a copy was inserted (duplicate)",
                    describe(first)
                ),
            );
            return;
        }
        let origin_seq = match self.origin {
            Origin::After { seq, .. } => Some(seq),
            _ => None,
        };
        let reordered = if let Some(anchor) = origin_seq
            && seq <= anchor
        {
            Some(format!(
                "record seq {seq} comes after the checkpointed record seq {anchor}: records were \
                 reordered or re-inserted"
            ))
        } else if let Some((previous_seq, _, previous_location)) = self.previous
            && seq < previous_seq
        {
            Some(format!(
                "record seq {seq} comes after record seq {previous_seq} ({}): records were \
                 reordered",
                describe(previous_location)
            ))
        } else {
            None
        };
        let late = self.fill_gap(seq);
        if let Some(message) = reordered {
            self.report(
                location,
                Some(seq),
                ProblemKind::DuplicateOrOutOfOrder,
                message,
            );
        } else if !late && seq <= self.max_seq && self.previous.is_some() {
            self.report(
                location,
                Some(seq),
                ProblemKind::DuplicateOrOutOfOrder,
                format!("record seq {seq} appears after records with higher seqs: out of order"),
            );
        }
        let expected = match (self.previous, self.origin) {
            (Some(_), _) => self.max_seq + 1,
            (None, Origin::Beginning) => 1,
            (None, Origin::After { seq, .. }) => seq + 1,
            (None, Origin::Unknown) => seq,
        };
        if seq > expected && seq > self.max_seq {
            self.open_gap(expected.max(self.max_seq + 1), seq - 1, location);
        }
        self.claimed_ahead.remove(&seq);
        // The chain: `prev` is the hash of the record with seq - 1, wherever it is.
        let needed = seq - 1;
        let predecessor = if let Origin::After { seq: anchor, hash } = self.origin
            && needed == anchor
        {
            Some((
                Location::default(),
                hash,
                "the checkpointed record".to_owned(),
            ))
        } else if needed == 0 {
            Some((
                Location::default(),
                [0u8; 32],
                "the start of the journal (all zeros)".to_owned(),
            ))
        } else {
            self.window.get(&needed).map(|(where_, hash)| {
                (
                    *where_,
                    *hash,
                    format!("record seq {needed} at {}", describe(*where_)),
                )
            })
        };
        let unknown_start = matches!(self.origin, Origin::Unknown) && self.previous.is_none();
        if parsed.kind() == "journal_gap_acknowledged" {
            self.check_acknowledged_gap(parsed, location);
        } else if let Some((_, expected_hash, description)) = predecessor {
            if expected_hash != parsed.prev && !unknown_start {
                self.report(
                    location,
                    Some(seq),
                    ProblemKind::BrokenChain,
                    format!(
                        "record seq {seq} does not chain to {description} ({}): its prev is {}",
                        hex(&expected_hash),
                        hex(&parsed.prev)
                    ),
                );
            }
        } else if !unknown_start && self.pending_chain.len() < MAX_PENDING {
            self.pending_chain.insert(
                needed,
                PendingChain {
                    seq,
                    prev: parsed.prev,
                    location,
                },
            );
        }
        if let Some(waiting) = self.pending_chain.remove(&seq)
            && waiting.prev != hash
        {
            self.report(
                waiting.location,
                Some(waiting.seq),
                ProblemKind::BrokenChain,
                format!(
                    "record seq {} does not chain to record seq {seq} at {} ({}): its prev is {}",
                    waiting.seq,
                    describe(location),
                    hex(&hash),
                    hex(&waiting.prev)
                ),
            );
        }
        self.remember(seq, location, hash);
        self.max_seq = self.max_seq.max(seq);
        self.previous = Some((seq, hash, location));
    }

    /// A gap an operator acknowledged: the record names the missing range, and chains to the
    /// record before it.
    fn check_acknowledged_gap(&mut self, parsed: &ParsedLine, location: Location) {
        let event = &parsed.record.event;
        let (Some(from), Some(to)) = (event["from"].as_u64(), event["to"].as_u64()) else {
            self.report(
                location,
                Some(parsed.record.seq),
                ProblemKind::BadJson,
                "a gap acknowledgement without its range".to_owned(),
            );
            return;
        };
        let chained = self
            .window
            .get(&(from - 1))
            .is_some_and(|(_, hash)| *hash == parsed.prev)
            || (from == 1 && parsed.prev == [0u8; 32]);
        if !chained || to + 1 != parsed.record.seq {
            self.report(
                location,
                Some(parsed.record.seq),
                ProblemKind::BrokenChain,
                format!(
                    "the acknowledgement of missing records seq {from} to {to} does not follow \
                     record seq {}",
                    from - 1
                ),
            );
        }
        for seq in from..=to.min(from + MAX_PENDING as u64) {
            self.fill_gap(seq);
        }
        self.tally.acknowledged.push(format!(
            "records seq {from} to {to} are lost; acknowledged by uid {} at seq {}: {}",
            event["by_uid"],
            parsed.record.seq,
            event["reason"].as_str().unwrap_or_default()
        ));
    }

    fn check_header(&mut self, parsed: &ParsedLine, location: Location) {
        if !std::mem::take(&mut self.segment_needs_header) {
            return;
        }
        let event = &parsed.record.event;
        let opens = matches!(parsed.kind(), "journal_segment" | "journal_keys");
        if !opens || event["segment"].as_u64() != Some(location.segment) {
            self.report(
                location,
                Some(parsed.record.seq),
                ProblemKind::MissingSegment,
                format!(
                    "segment {} does not begin with its header record: its beginning was cut or \
                     the file was renamed",
                    location.segment
                ),
            );
        }
    }

    fn track_epoch(&mut self, parsed: &ParsedLine, location: Location, proof: Option<KeySource>) {
        let Some(epoch) = parsed.epoch() else {
            return;
        };
        let seq = parsed.record.seq;
        let kind = parsed.kind();
        let state = self.epochs;
        if kind == "journal_gap_acknowledged" || kind == "journal_witness_lost_acknowledged" {
            // The lost records (named, or behind a lost witness) may have held the open epoch's
            // seal: the epoch goes on from the key the daemon held, which cannot be earlier.
            if state.epoch.is_some_and(|open| epoch < open) {
                self.report(
                    location,
                    Some(seq),
                    ProblemKind::EpochOrder,
                    format!("the gap acknowledgement claims epoch {epoch}, before the open epoch"),
                );
            }
            if state.epoch != Some(epoch) {
                self.awaiting_seal = 0;
                self.epochs.sealed = true;
                self.open_epoch(state.generation, epoch, Some(seq));
            } else {
                self.epochs.records += 1;
            }
        } else if kind == "journal_keys" {
            if epoch != 0 {
                self.report(
                    location,
                    Some(seq),
                    ProblemKind::EpochOrder,
                    format!(
                        "a key generation must start at epoch 0, record seq {seq} says {epoch}"
                    ),
                );
            }
            if state.epoch.is_some() && !state.sealed && state.records > 0 {
                self.unsealed_epoch(location, "a new key generation began");
            }
            let fingerprint = parse_fingerprint(&parsed.record.event["fingerprint"]);
            self.tally.generations.push((
                fingerprint.map(|f| hex(&f)).unwrap_or_default(),
                parsed.record.event["custody"]
                    .as_str()
                    .unwrap_or("unknown")
                    .to_owned(),
            ));
            self.open_epoch(fingerprint, epoch, Some(seq));
        } else {
            match state.epoch {
                None => {
                    let generation = state
                        .generation
                        .or_else(|| parse_fingerprint(&parsed.record.event["generation"]));
                    self.open_epoch(generation, epoch, None);
                }
                Some(open) if state.sealed => {
                    if epoch != open + 1 {
                        self.report(
                            location,
                            Some(seq),
                            ProblemKind::EpochOrder,
                            if epoch > open + 1 {
                                format!(
                                    "record seq {seq} is in epoch {epoch} but epoch {open} was \
                                     the last one sealed: epochs {} to {} are missing",
                                    open + 1,
                                    epoch - 1
                                )
                            } else {
                                format!(
                                    "record seq {seq} claims epoch {epoch} after epoch {open} was \
                                     sealed: it was re-keyed with a later key or moved"
                                )
                            },
                        );
                    }
                    self.open_epoch(state.generation, epoch, Some(seq));
                }
                Some(open) if epoch != open => {
                    self.report(
                        location,
                        Some(seq),
                        ProblemKind::EpochOrder,
                        if epoch > open {
                            format!(
                                "record seq {seq} is in epoch {epoch} but epoch {open} was never \
                                 sealed (its seal was removed, or this record was made with a \
                                 later key)"
                            )
                        } else {
                            format!(
                                "record seq {seq} claims epoch {epoch} inside epoch {open}: it \
                                 was moved or forged"
                            )
                        },
                    );
                    if epoch > open {
                        self.open_epoch(state.generation, epoch, Some(seq));
                    }
                }
                Some(_) => self.epochs.records += 1,
            }
        }
        if let Some(source) = proof {
            self.awaiting_seal += 1;
            if self.awaiting_source != Some(KeySource::Local) {
                self.awaiting_source = Some(source);
            }
        }
        if kind == "journal_seal" {
            self.close_epoch(parsed, location, epoch);
        }
    }

    fn open_epoch(&mut self, generation: Option<Fingerprint>, epoch: u64, first_seq: Option<u64>) {
        if !self.epochs.sealed {
            self.tally.unsealed += std::mem::take(&mut self.awaiting_seal);
        }
        self.awaiting_seal = 0;
        self.awaiting_source = None;
        self.epochs = EpochState {
            generation,
            epoch: Some(epoch),
            sealed: false,
            first_seq,
            records: 1,
        };
    }

    fn unsealed_epoch(&mut self, location: Location, why: &str) {
        let state = self.epochs;
        let from = state
            .first_seq
            .map_or("the start of this check".to_owned(), |seq| {
                format!("seq {seq}")
            });
        self.report(
            location,
            None,
            ProblemKind::Unsealed,
            format!(
                "epoch {} (records from {from} on, {} record(s)) was never sealed before {why}: \
                 those records cannot be proven",
                state.epoch.unwrap_or_default(),
                state.records
            ),
        );
        self.tally.unsealed += std::mem::take(&mut self.awaiting_seal);
        self.epochs.sealed = true;
    }

    fn close_epoch(&mut self, parsed: &ParsedLine, location: Location, epoch: u64) {
        let event = &parsed.record.event;
        let state = self.epochs;
        let mut faults = Vec::new();
        if event["epoch"].as_u64() != Some(epoch) {
            faults.push(format!(
                "names epoch {} but is in epoch {epoch}",
                event["epoch"]
            ));
        }
        if let (Some(named), Some(current)) =
            (parse_fingerprint(&event["generation"]), state.generation)
            && named != current
        {
            faults.push(format!(
                "names key generation {} but the epoch belongs to {}",
                hex(&named),
                hex(&current)
            ));
        }
        // The seal's own arithmetic; records deleted or inserted inside the epoch are reported
        // by the sequence checks, not a second time here.
        let seq = parsed.record.seq;
        match (event["first_seq"].as_u64(), event["records"].as_u64()) {
            // At most the span: an acknowledged gap may lie inside the epoch.
            (Some(first), Some(records))
                if first <= seq && records >= 1 && records <= seq - first + 1 =>
            {
                if let Some(observed) = state.first_seq
                    && first > observed
                {
                    faults.push(format!(
                        "says the epoch began at seq {first} but it holds seq {observed}"
                    ));
                }
            }
            _ => faults.push(format!(
                "does not describe the records before it (first_seq {}, records {})",
                event["first_seq"], event["records"]
            )),
        }
        if faults.is_empty() {
            self.epochs.sealed = true;
            self.tally.sealed_epochs += 1;
            let proven = std::mem::take(&mut self.awaiting_seal);
            match self.awaiting_source.take() {
                Some(KeySource::Operator) => self.tally.proven_operator += proven,
                Some(KeySource::Local) => self.tally.proven_local += proven,
                None => {}
            }
        } else {
            self.report(
                location,
                Some(parsed.record.seq),
                ProblemKind::BadSeal,
                format!("the seal of epoch {epoch} {}", faults.join("; ")),
            );
        }
    }

    fn compare_witness(&mut self, seq: u64, hash: &[u8; 32], location: Location) {
        if self.witness.is_none() {
            return;
        }
        loop {
            if self.witness_peek.is_none() {
                self.witness_peek = self.next_head();
            }
            let Some(entry) = self.witness_peek else {
                self.tally.unwitnessed += 1;
                return;
            };
            if entry.head.seq < seq {
                self.witness_peek = None;
                continue;
            }
            if entry.head.seq > seq {
                self.tally.unwitnessed += 1;
                return;
            }
            self.witness_peek = None;
            if entry.head.hash == *hash {
                self.tally.witness_matched += 1;
            } else {
                self.report(
                    location,
                    Some(seq),
                    ProblemKind::WitnessMismatch,
                    format!(
                        "record seq {seq} is not the record that was published for seq {seq} \
                         (witness{} has hash {}): it was rewritten after it was written",
                        witness_line(entry.line),
                        hex(&entry.head.hash)
                    ),
                );
            }
            return;
        }
    }

    fn next_head(&mut self) -> Option<WitnessEntry> {
        loop {
            let line = self.witness.as_mut()?.next()?;
            match line {
                WitnessLine::Garbage(line) => self.report(
                    Location::default(),
                    None,
                    ProblemKind::WitnessDamaged,
                    format!("witness line {line} is not a published head: it was written by someone else"),
                ),
                WitnessLine::Head(entry) => {
                    self.tally.witness_heads += 1;
                    self.tally.witness_last = Some(entry.head.seq);
                    if let Some((previous_seq, previous_line)) = self.witness_previous
                        && entry.head.seq <= previous_seq
                    {
                        self.report(
                            Location::default(),
                            Some(entry.head.seq),
                            ProblemKind::WitnessDamaged,
                            format!(
                                "the witness goes backwards: head seq {} at{} after seq \
                                 {previous_seq}{}; someone appended to it",
                                entry.head.seq,
                                witness_line(entry.line),
                                witness_line(previous_line)
                            ),
                        );
                    }
                    self.witness_previous = Some((entry.head.seq, entry.line));
                    return Some(entry);
                }
            }
        }
    }

    /// Ends the check: open gaps become findings, heads past the end become `Truncated`, and an
    /// open epoch is reported when seals are checked strictly.
    pub(super) fn finish(&mut self) {
        let gaps = std::mem::take(&mut self.gaps);
        for (start, (end, location)) in gaps {
            self.report_gap(start, end, location);
        }
        if self.witness.is_some() {
            let end_seq = self.max_seq;
            let mut beyond: Option<(u64, u64, [u8; 32])> = None;
            let mut entry = self.witness_peek.take().or_else(|| self.next_head());
            while let Some(current) = entry {
                if current.head.seq > end_seq {
                    let first = beyond.map_or(current.head.seq, |(first, _, _)| first);
                    beyond = Some((first, current.head.seq, current.head.hash));
                }
                entry = self.next_head();
            }
            if let Some((first, last, hash)) = beyond {
                self.tally.truncated = Some((first, last, hash));
                let location = self
                    .end
                    .map(|end| Location {
                        segment: end.segment,
                        line: end.line + 1,
                    })
                    .unwrap_or_default();
                let range = if first == last {
                    format!("record seq {first} is")
                } else {
                    format!("records seq {first} to {last} are")
                };
                self.report(
                    location,
                    Some(first),
                    ProblemKind::Truncated,
                    format!(
                        "the journal ends at seq {end_seq} but the heads published to the \
                         witness go on to seq {last} (hash {}): {range} missing from the end \
                         (cut off, or an older copy of the journal was put back)",
                        hex(&hash)
                    ),
                );
            }
        }
        let state = self.epochs;
        if self.strict_seals && state.epoch.is_some() && !state.sealed && state.records > 0 {
            let location = self.end.map_or(Location::default(), |end| Location {
                segment: end.segment,
                line: end.line,
            });
            self.unsealed_epoch(location, "the end of the journal (a running daemon seals it at the next epoch boundary or when it stops; a crashed one at its next start)");
        } else if !state.sealed {
            self.tally.unsealed += std::mem::take(&mut self.awaiting_seal);
        }
        self.problems
            .sort_by_key(|problem| (problem.segment, problem.line));
    }
}

fn describe(location: Location) -> String {
    match (location.segment, location.line) {
        (_, 0) => "the checkpoint".to_owned(),
        (0 | 1, line) => format!("line {line}"),
        (segment, line) => format!("segment {segment} line {line}"),
    }
}

fn witness_line(line: u64) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" line {line}")
    }
}

pub(super) fn parse_fingerprint(value: &serde_json::Value) -> Option<Fingerprint> {
    let mut fingerprint = [0u8; super::keys::FINGERPRINT_BYTES];
    parse_hex_into(value.as_str()?, &mut fingerprint).then_some(fingerprint)
}

/// `Read` over a file at an explicit position (pread), leaving the file's own offset alone.
pub(super) struct PositionedReader {
    file: File,
    position: u64,
}

impl Read for PositionedReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let count = self.file.read_at(buffer, self.position)?;
        self.position += count as u64;
        Ok(count)
    }
}

/// One complete line as read by [`SegmentReader`].
pub(super) struct Line {
    pub(super) bytes: Vec<u8>,
    pub(super) location: Location,
    pub(super) start: u64,
    pub(super) end: u64,
    /// The first line read from this segment file.
    pub(super) opens_segment: Option<SegmentFile>,
}

/// Pulls complete lines from a list of segment files in order, starting at a byte offset (a line
/// boundary) of the first one. An incomplete last line of the live segment is reported in
/// [`SegmentReader::torn`]; in a closed segment it is an error.
pub(super) struct SegmentReader {
    segments: std::vec::IntoIter<SegmentFile>,
    current: Option<(SegmentFile, BufReader<io::Take<PositionedReader>>)>,
    offset: u64,
    line: u64,
    fresh: bool,
    buffer: Vec<u8>,
    pub(super) torn: Option<(SegmentFile, TornTail, u64)>,
}

impl SegmentReader {
    pub(super) fn new(
        segments: Vec<SegmentFile>,
        start_offset: u64,
        lines_before: u64,
    ) -> SegmentReader {
        SegmentReader {
            segments: segments.into_iter(),
            current: None,
            offset: start_offset,
            line: lines_before,
            fresh: true,
            buffer: Vec::new(),
            torn: None,
        }
    }

    fn open_next(&mut self) -> Result<bool, JournalError> {
        let Some(segment) = self.segments.next() else {
            return Ok(false);
        };
        let file = super::storage::open_for_reading(&segment.path)?.ok_or_else(|| {
            JournalError::Missing {
                path: segment.path.clone(),
            }
        })?;
        let length = file
            .metadata()
            .map_err(|source| JournalError::Io {
                what: "journal file",
                path: segment.path.clone(),
                action: "stat",
                source,
            })?
            .len();
        if !self.fresh {
            self.offset = 0;
            self.line = 0;
        }
        self.fresh = false;
        let reader = BufReader::with_capacity(
            256 * 1024,
            PositionedReader {
                file,
                position: self.offset,
            }
            .take(length.saturating_sub(self.offset)),
        );
        self.current = Some((segment, reader));
        Ok(true)
    }

    pub(super) fn next_line(&mut self) -> Result<Option<Line>, JournalError> {
        let mut opens = None;
        loop {
            if self.current.is_none() {
                if !self.open_next()? {
                    return Ok(None);
                }
                opens = self.current.as_ref().map(|(segment, _)| segment.clone());
            }
            let (segment, reader) = self.current.as_mut().expect("a segment is open");
            self.buffer.clear();
            let count = reader
                .by_ref()
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.buffer)
                .map_err(|source| JournalError::Io {
                    what: "journal file",
                    path: segment.path.clone(),
                    action: "read",
                    source,
                })?;
            if count == 0 {
                self.current = None;
                continue;
            }
            if self.buffer.last() != Some(&b'\n') {
                if count > MAX_LINE_BYTES || !segment.live {
                    return Err(JournalError::File {
                        path: segment.path.clone(),
                        reason: format!(
                            "line {} is incomplete or longer than {MAX_LINE_BYTES} bytes; the \
                             journal never writes such a line in a closed segment",
                            self.line + 1
                        ),
                    });
                }
                self.torn = Some((
                    segment.clone(),
                    TornTail {
                        line: self.line + 1,
                        bytes: count as u64,
                        sha256: sha256(&self.buffer),
                    },
                    self.offset,
                ));
                self.current = None;
                continue;
            }
            self.line += 1;
            let start = self.offset;
            self.offset += count as u64;
            self.buffer.pop();
            return Ok(Some(Line {
                bytes: std::mem::take(&mut self.buffer),
                location: Location {
                    segment: segment.number,
                    line: self.line,
                },
                start,
                end: self.offset,
                opens_segment: opens,
            }));
        }
    }
}

/// Checks that `mark` still describes its segment: the bytes it names are one line that hashes
/// to the recorded hash and carries the recorded seq.
pub(super) fn check_mark(file: &File, path: &Path, mark: &Mark) -> Result<(), String> {
    let length = file.metadata().map_err(|error| error.to_string())?.len();
    if length < mark.end {
        return Err(format!(
            "records up to seq {} (line {}) ended at byte {} of {}, but it is now {length} \
             bytes: records were removed",
            mark.seq,
            mark.line,
            mark.end,
            path.display()
        ));
    }
    let span = usize::try_from(mark.end.saturating_sub(mark.start))
        .ok()
        .filter(|span| *span >= 2 && *span <= MAX_LINE_BYTES + 1)
        .ok_or_else(|| "it describes an impossible line".to_owned())?;
    let mut line = vec![0u8; span];
    file.read_exact_at(&mut line, mark.start)
        .map_err(|error| error.to_string())?;
    if line.pop() != Some(b'\n')
        || sha256(&line) != mark.hash
        || super::record::peek_seq(&line) != Some(mark.seq)
    {
        return Err(format!(
            "line {} (record seq {}) of {} no longer matches it: the journal was altered or \
             rewritten",
            mark.line,
            mark.seq,
            path.display()
        ));
    }
    Ok(())
}

/// Heads of a witness file as the checker consumes them.
pub(super) fn witness_lines(stream: WitnessStream) -> Box<dyn Iterator<Item = WitnessLine>> {
    let mut stream = stream;
    Box::new(std::iter::from_fn(move || {
        stream.next_line().ok().flatten()
    }))
}
