//! Read-only views of a level's queues and waiting requests, for debug
//! dumps (Kubernetes' `/debug/api_priority_and_fairness/dump_queues` and
//! `dump_requests`).

use super::core::Core;
use super::vtime::VTime;
use crate::clock::Instant;
use crate::work_estimate::WorkEstimate;

/// One queue as the dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDump {
    /// The queue's index in the level.
    pub index: u32,
    /// Requests waiting in it.
    pub waiting: usize,
    /// Requests from it executing now.
    pub executing: u32,
    /// Seats its requests hold (executing, or lingering for additional
    /// latency).
    pub seats_in_use: u32,
    /// The virtual time at which its head may be dispatched.
    pub next_dispatch_r: VTime,
    /// Sum of the initial seats of its waiting requests.
    pub initial_seats_sum: u64,
    /// Sum of the max(initial, final) seats of its waiting requests.
    pub max_seats_sum: u64,
    /// Sum of the virtual work of its waiting requests.
    pub total_work_sum: VTime,
}

/// A request waiting in a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingDump {
    /// Its queue.
    pub queue: u32,
    /// Its position in the queue (0: the head).
    pub position: usize,
    /// Its arrival number in the level (see [`Waiting::id`](super::Waiting::id)).
    pub id: u64,
    /// The caller's tag (the dispatcher's flow-schema id, with
    /// [`READ_ONLY_TAG`](crate::stats::READ_ONLY_TAG) for a read-only
    /// request).
    pub tag: u32,
    /// When it arrived.
    pub arrival: Instant,
    /// When it times out: the earlier of arrival plus the wait limit and its own
    /// deadline.
    pub deadline: Instant,
    /// Its estimate, after clamping.
    pub estimate: WorkEstimate,
}

/// A level's queues and waiting requests at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSetDump {
    /// The level's virtual time R.
    pub current_r: VTime,
    /// Every queue, by index.
    pub queues: Vec<QueueDump>,
    /// Waiting requests, queue by queue, head first.
    pub waiting: Vec<WaitingDump>,
}

impl Core {
    pub(crate) fn dump(&self) -> QueueSetDump {
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| QueueDump {
                index: i as u32,
                waiting: q.waiting.len(),
                executing: q.executing,
                seats_in_use: q.seats_in_use,
                next_dispatch_r: q.next_dispatch_r,
                initial_seats_sum: q
                    .waiting
                    .iter()
                    .map(|w| w.estimate.initial_seats as u64)
                    .sum(),
                max_seats_sum: q.waiting_seats,
                total_work_sum: q.waiting_work,
            })
            .collect();
        let waiting = self
            .queues
            .iter()
            .enumerate()
            .flat_map(|(i, q)| {
                q.waiting
                    .iter()
                    .enumerate()
                    .map(move |(pos, w)| WaitingDump {
                        queue: i as u32,
                        position: pos,
                        id: w.slot.seq,
                        tag: w.slot.tag,
                        arrival: w.arrival,
                        deadline: w.deadline,
                        estimate: w.estimate,
                    })
            })
            .collect();
        QueueSetDump {
            current_r: self.r(),
            queues,
            waiting,
        }
    }
}
