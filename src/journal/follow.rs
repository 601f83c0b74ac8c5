//! Following the journal as it grows (`verbd audit tail --follow`): every record is checked as
//! it is read — hash chain, sequence, epochs and seals, and MACs under the keys this host can
//! read (the daemon's live key evolves forward with its epochs) — by one checker that lives as
//! long as the follower, so the chain is verified across every append, across a daemon restart
//! and across a segment rotation (the live segment renamed to an archive, a new one begun).
//!
//! Invariants: a record is returned only after the checker accepted it and everything before it;
//! any problem is an error (the follower stops: what comes after an altered record proves
//! nothing); an incomplete last line of the live segment is a write in progress, read again at
//! the next poll, never a record.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use super::read::{host_keys, torn_problem};
use super::scan::{Checker, Origin, SegmentReader};
use super::storage::{self, Access, Mark};
use super::{JournalError, Record};

/// A reader that keeps its place in the journal and its checker between polls.
pub struct Follower {
    dir: PathBuf,
    checker: Checker,
    /// Where the next read starts: segment number, byte offset and lines read in it.
    segment: u64,
    offset: u64,
    line: u64,
    /// The last segment the checker was told about.
    begun: Option<u64>,
}

impl Follower {
    /// Checks the journal to its end and returns the follower with the last `n` records that
    /// `wanted` accepts (it sees every verified record, in order): from the last seal's
    /// checkpoint when that verifies and holds `n` such records, as `audit tail` does, else
    /// from the first record.
    pub fn start(
        state_dir: &Path,
        n: usize,
        wanted: &mut dyn FnMut(&Record) -> bool,
    ) -> Result<(Follower, Vec<Record>), JournalError> {
        storage::prepare_state_dir(state_dir, Access::Reader)?;
        if storage::list_segments(state_dir)?.is_empty() {
            return Err(JournalError::Missing {
                path: state_dir.join(super::JOURNAL_FILE),
            });
        }
        let torn_allowed = storage::daemon_holds_lock(state_dir);
        if let Some(mark) = storage::read_hints(state_dir).unwrap_or_default().anchor {
            let mut follower = Follower::at(state_dir, Some(mark))?;
            if let Ok(records) = follower.read(n, torn_allowed, wanted)
                && records.len() >= n
            {
                return Ok((follower, records.into()));
            }
        }
        let mut follower = Follower::at(state_dir, None)?;
        let records = follower.read(n, torn_allowed, wanted)?;
        Ok((follower, records.into()))
    }

    fn at(dir: &Path, mark: Option<Mark>) -> Result<Follower, JournalError> {
        let keys = host_keys(dir)?;
        let (origin, segment, offset, line) = match &mark {
            Some(mark) => (
                Origin::After {
                    seq: mark.seq,
                    hash: mark.hash,
                },
                mark.segment,
                mark.end,
                mark.line,
            ),
            None => (Origin::Beginning, 1, 0, 0),
        };
        let mut checker = Checker::new(keys, origin, false);
        let mut begun = None;
        if mark.is_some() {
            // Resuming in the middle of this segment: its header was checked before.
            if let Some(file) = storage::list_segments(dir)?
                .into_iter()
                .find(|s| s.number == segment)
            {
                checker.begin_segment(&file, true);
                begun = Some(segment);
            }
        }
        Ok(Follower {
            dir: dir.to_owned(),
            checker,
            segment,
            offset,
            line,
            begun,
        })
    }

    /// The records appended since the last call that `wanted` accepts, each verified.
    pub fn poll(
        &mut self,
        wanted: &mut dyn FnMut(&Record) -> bool,
    ) -> Result<Vec<Record>, JournalError> {
        Ok(self.read(usize::MAX, true, wanted)?.into())
    }

    /// Reads every complete line from where the last read stopped, keeping the last `keep`
    /// records `wanted` accepts; an incomplete last line is a problem only when `torn_allowed`
    /// is false.
    fn read(
        &mut self,
        keep: usize,
        torn_allowed: bool,
        wanted: &mut dyn FnMut(&Record) -> bool,
    ) -> Result<VecDeque<Record>, JournalError> {
        let segments: Vec<_> = storage::list_segments(&self.dir)?
            .into_iter()
            .filter(|s| s.number >= self.segment)
            .collect();
        let (offset, line) = match segments.first() {
            Some(first) if first.number == self.segment => (self.offset, self.line),
            _ => (0, 0),
        };
        let mut reader = SegmentReader::new(segments, offset, line);
        let mut records = VecDeque::new();
        while let Some(line) = reader.next_line()? {
            if let Some(segment) = &line.opens_segment
                && self.begun.is_none_or(|begun| segment.number > begun)
            {
                self.checker.begin_segment(segment, false);
                self.begun = Some(segment.number);
            }
            let parsed = self
                .checker
                .feed(&line.bytes, line.location, line.start, line.end);
            (self.segment, self.offset, self.line) =
                (line.location.segment, line.end, line.location.line);
            if let Some(parsed) = parsed
                && wanted(&parsed.record)
            {
                if records.len() == keep {
                    records.pop_front();
                }
                if keep > 0 {
                    records.push_back(parsed.record);
                }
            }
        }
        if let Some((_, torn, _)) = &reader.torn
            && !torn_allowed
        {
            self.checker.problems.push(torn_problem(torn));
        }
        if !self.checker.problems.is_empty() {
            return Err(JournalError::Integrity {
                path: self.dir.join(super::JOURNAL_FILE),
                problems: std::mem::take(&mut self.checker.problems),
            });
        }
        Ok(records)
    }
}
