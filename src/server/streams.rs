//! Places for streaming runs: a streaming verb holds an execution slot for its whole run (up
//! to 15 minutes), so streams may take at most half of `daemon.max_executions`, and one caller
//! uid at most a quarter (at least one each). The other half stays for runs that end on their
//! own, so no caller — and no set of callers — can hold every slot with streams.
//!
//! Invariants: a [`StreamPlace`] is the only thing that counts a running stream, and dropping
//! it is the only way to give the place back; the counts never exceed their limits.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The streaming runs going now, in all and per caller uid.
#[derive(Debug)]
pub struct StreamPlaces {
    max_executions: usize,
    held: Arc<Mutex<Held>>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_uid: HashMap<u32, usize>,
}

/// One running stream's place; given back when dropped.
#[derive(Debug)]
pub struct StreamPlace {
    uid: u32,
    held: Arc<Mutex<Held>>,
}

/// Why a stream could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StreamRefused {
    #[error(
        "uid {uid} already has {limit} streaming calls running (a quarter of daemon.max_executions = {max_executions}); let one end, then retry"
    )]
    Caller {
        uid: u32,
        limit: usize,
        max_executions: usize,
    },
    #[error(
        "verbd is running its maximum of {limit} streaming calls (half of daemon.max_executions = {max_executions}); retry shortly"
    )]
    Daemon { limit: usize, max_executions: usize },
}

impl StreamPlaces {
    pub fn new(max_executions: usize) -> StreamPlaces {
        StreamPlaces {
            max_executions,
            held: Arc::default(),
        }
    }

    /// Most streams at once, in all.
    pub fn limit(&self) -> usize {
        (self.max_executions / 2).max(1)
    }

    /// Most streams at once of one uid.
    pub fn limit_per_uid(&self) -> usize {
        (self.max_executions / 4).max(1)
    }

    /// A place for a stream of `uid`, or why there is none now.
    pub fn take(&self, uid: u32) -> Result<StreamPlace, StreamRefused> {
        let mut held = self.held.lock().expect("stream places lock");
        let mine = held.by_uid.get(&uid).copied().unwrap_or(0);
        if mine >= self.limit_per_uid() {
            return Err(StreamRefused::Caller {
                uid,
                limit: self.limit_per_uid(),
                max_executions: self.max_executions,
            });
        }
        if held.total >= self.limit() {
            return Err(StreamRefused::Daemon {
                limit: self.limit(),
                max_executions: self.max_executions,
            });
        }
        held.total += 1;
        *held.by_uid.entry(uid).or_default() += 1;
        Ok(StreamPlace {
            uid,
            held: self.held.clone(),
        })
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().expect("stream places lock");
        held.total -= 1;
        if let Some(mine) = held.by_uid.get_mut(&self.uid) {
            *mine -= 1;
            if *mine == 0 {
                held.by_uid.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_uid_takes_a_quarter_and_all_streams_half_of_the_slots() {
        let places = StreamPlaces::new(16);
        let mine: Vec<_> = (0..4).map(|_| places.take(61001).unwrap()).collect();
        assert!(matches!(
            places.take(61001),
            Err(StreamRefused::Caller { limit: 4, .. })
        ));
        let others: Vec<_> = (0..4).map(|_| places.take(61002).unwrap()).collect();
        assert!(matches!(
            places.take(61003),
            Err(StreamRefused::Daemon { limit: 8, .. })
        ));
        drop(mine);
        let again = places.take(61001).unwrap();
        drop((others, again));
        assert_eq!(places.held.lock().unwrap().total, 0);
        assert!(places.held.lock().unwrap().by_uid.is_empty());
        // A daemon with one slot still runs one stream.
        assert!(StreamPlaces::new(1).take(1).is_ok());
    }
}
