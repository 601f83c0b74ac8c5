//! Execution slots shared fairly: at most `capacity` runs at once, and a bounded wait in turn for
//! a run that finds them all taken.
//!
//! Waiting runs queue in **lanes**: each caller uid is one, approved proposals are one more.
//! A freed slot goes to the first waiter of the next lane in rotation, and a lane that still has
//! waiters goes to the back; a lane that starts waiting joins at the back. So a caller flooding
//! with hundreds of calls delays another caller's single call by at most one slot turn per lane
//! waiting ahead of it, never by the length of the flood.
//!
//! Invariants: a [`Slot`] is the only thing that holds a place, and dropping it is the only way
//! to give one back (to the next waiter, or to the pool); a waiter that gives up (its deadline,
//! its client hanging up) leaves the queue before it stops waiting, and a slot handed to it in
//! that instant is passed on, never lost; nobody waits while a slot is free.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Whose turn a waiting run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// A direct call by this uid.
    Caller(u32),
    /// A run of an approved proposal (a human already decided; it waits longer, in its own lane).
    Approved,
}

/// A fixed number of slots with a fair queue.
#[derive(Debug)]
pub struct FairSlots {
    capacity: usize,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    in_use: usize,
    /// Lanes with at least one waiter, in turn order.
    rotation: VecDeque<Lane>,
    waiting: HashMap<Lane, VecDeque<Waiter>>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    grant: oneshot::Sender<Slot>,
}

impl FairSlots {
    pub fn new(capacity: usize) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            capacity,
            queue: Mutex::new(Queue::default()),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.queue.lock().expect("slot lock").in_use
    }

    /// A slot now, if one is free (there is never a waiter then).
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let mut queue = self.queue.lock().expect("slot lock");
        (queue.in_use < self.capacity).then(|| {
            queue.in_use += 1;
            Slot::held(self)
        })
    }

    /// A slot, waiting in `lane`'s turn until `deadline` at most (`None`: none freed by then).
    /// Dropping the future leaves the queue.
    pub async fn take(self: &Arc<Self>, lane: Lane, deadline: Instant) -> Option<Slot> {
        let (grant, mut granted) = oneshot::channel();
        let ticket = {
            let mut queue = self.queue.lock().expect("slot lock");
            if queue.in_use < self.capacity {
                queue.in_use += 1;
                return Some(Slot::held(self));
            }
            let ticket = queue.next_ticket;
            queue.next_ticket += 1;
            let lane_waiters = queue.waiting.entry(lane).or_default();
            lane_waiters.push_back(Waiter { ticket, grant });
            if lane_waiters.len() == 1 {
                queue.rotation.push_back(lane);
            }
            ticket
        };
        let waiting = Waiting {
            slots: self,
            lane,
            ticket,
        };
        match tokio::time::timeout_at(deadline, &mut granted).await {
            Ok(Ok(slot)) => Some(slot),
            // The sender is dropped unsent only by `Waiting::drop`, which has not run.
            Ok(Err(_)) => None,
            Err(_) => {
                // Out of the queue first: after that no slot can be handed to this waiter, so
                // `try_recv` sees the one handed over just before, if any.
                drop(waiting);
                granted.try_recv().ok()
            }
        }
    }

    /// Give a slot back: to the next lane's first waiter, or to the pool.
    fn release(self: &Arc<Self>) {
        let mut queue = self.queue.lock().expect("slot lock");
        while let Some(lane) = queue.rotation.pop_front() {
            let Some(lane_waiters) = queue.waiting.get_mut(&lane) else {
                continue;
            };
            let Some(waiter) = lane_waiters.pop_front() else {
                queue.waiting.remove(&lane);
                continue;
            };
            if lane_waiters.is_empty() {
                queue.waiting.remove(&lane);
            } else {
                queue.rotation.push_back(lane);
            }
            match waiter.grant.send(Slot::held(self)) {
                Ok(()) => return,
                // Its receiver is gone (it stopped waiting): the slot goes on to the next, and is
                // not released a second time by its own drop.
                Err(mut unwanted) => unwanted.slots = None,
            }
        }
        queue.in_use -= 1;
    }
}

/// A queued waiter's place; dropping it leaves the queue.
struct Waiting<'a> {
    slots: &'a Arc<FairSlots>,
    lane: Lane,
    ticket: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Ok(mut queue) = self.slots.queue.lock() else {
            return;
        };
        let Some(lane_waiters) = queue.waiting.get_mut(&self.lane) else {
            return;
        };
        lane_waiters.retain(|w| w.ticket != self.ticket);
        if lane_waiters.is_empty() {
            queue.waiting.remove(&self.lane);
            queue.rotation.retain(|lane| *lane != self.lane);
        }
    }
}

/// One slot, held until dropped.
#[derive(Debug)]
pub struct Slot {
    /// `None` only for a slot that was passed on to another waiter.
    slots: Option<Arc<FairSlots>>,
}

impl Slot {
    fn held(slots: &Arc<FairSlots>) -> Slot {
        Slot {
            slots: Some(slots.clone()),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn a_flooding_lane_gets_one_turn_in_each_round() {
        let slots = FairSlots::new(1);
        let held = slots.try_take().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Lane 1 queues ten runs, then lane 2 queues one.
        for n in 0..11 {
            let lane = if n < 10 {
                Lane::Caller(1)
            } else {
                Lane::Caller(2)
            };
            let (queue, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let slot = queue.take(lane, soon(10_000)).await.expect("a slot");
                order.lock().unwrap().push(lane);
                tokio::task::yield_now().await;
                drop(slot);
            }));
            // Queue in this order.
            while slots
                .queue
                .lock()
                .unwrap()
                .waiting
                .values()
                .map(VecDeque::len)
                .sum::<usize>()
                < n + 1
            {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        let order = order.lock().unwrap();
        let second = order.iter().position(|l| *l == Lane::Caller(2)).unwrap();
        assert_eq!(second, 1, "lane 2 waited behind lane 1's flood: {order:?}");
        assert_eq!(slots.in_use(), 0);
    }

    #[tokio::test]
    async fn a_waiter_past_its_deadline_gets_none_and_leaves_the_queue() {
        let slots = FairSlots::new(1);
        let held = slots.try_take().unwrap();
        assert!(slots.take(Lane::Caller(1), soon(50)).await.is_none());
        assert!(slots.queue.lock().unwrap().waiting.is_empty());
        assert!(slots.queue.lock().unwrap().rotation.is_empty());
        drop(held);
        assert_eq!(slots.in_use(), 0);
        let again = slots.try_take();
        assert!(again.is_some());
    }

    #[tokio::test]
    async fn a_cancelled_waiter_never_swallows_a_slot() {
        let slots = FairSlots::new(1);
        let held = slots.try_take().unwrap();
        let cancelled = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take(Lane::Caller(1), soon(10_000)).await })
        };
        while slots.queue.lock().unwrap().waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        let patient = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take(Lane::Caller(2), soon(10_000)).await })
        };
        while slots.queue.lock().unwrap().rotation.len() < 2 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());
        drop(held);
        let slot = patient
            .await
            .unwrap()
            .expect("the slot reached the patient waiter");
        assert_eq!(slots.in_use(), 1);
        drop(slot);
        assert_eq!(slots.in_use(), 0);
    }

    #[tokio::test]
    async fn a_slot_handed_to_a_receiver_already_gone_passes_on() {
        let slots = FairSlots::new(1);
        let held = slots.try_take().unwrap();
        // A waiter whose receiver is gone but whose queue entry is still there (the instant
        // between the two when a waiting future is dropped).
        let (grant, granted) = oneshot::channel();
        drop(granted);
        {
            let mut queue = slots.queue.lock().unwrap();
            queue.waiting.insert(
                Lane::Caller(7),
                VecDeque::from([Waiter { ticket: 99, grant }]),
            );
            queue.rotation.push_back(Lane::Caller(7));
        }
        drop(held);
        assert_eq!(slots.in_use(), 0, "the slot went back to the pool");
        assert!(slots.try_take().is_some());
    }
}
