//! The borrowing forms of a decision: a guard that finishes its request
//! when dropped, and a ticket that waits (blocking, polling or as a future)
//! and cancels its request when dropped.

use super::{Execution, QueueSet, RejectReason, ReleaseError, Waiting};
use crate::clock::Instant;
use crate::work_estimate::WorkEstimate;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

// ----- guards and tickets ----------------------------------------------------

/// An executing request. Dropping it finishes the request (so a panicking
/// handler cannot leak seats); [`Guard::finish_at`] finishes it with an
/// explicit end time.
#[must_use = "dropping the guard finishes the request at once"]
pub struct Guard<'q> {
    pub(super) qs: &'q QueueSet,
    pub(super) exec: Option<Execution>,
}

impl Guard<'_> {
    fn exec(&self) -> &Execution {
        self.exec
            .as_ref()
            .expect("a live guard holds its execution")
    }

    /// When the request started executing.
    pub fn start_time(&self) -> Instant {
        self.exec().start_time()
    }

    /// The work estimate it holds seats for (after clamping).
    pub fn estimate(&self) -> WorkEstimate {
        self.exec().estimate()
    }

    /// The queue it belongs to, if the level queues.
    pub fn queue(&self) -> Option<u32> {
        self.qs.execution_queue(self.exec())
    }

    /// The seats it still holds (its estimate's, less those released).
    pub fn held_seats(&self) -> u32 {
        self.exec().held_seats()
    }

    /// Give back `seats` now while the request keeps executing (see
    /// [`QueueSet::release_seats`]).
    pub fn release_seats(&mut self, seats: u32) -> Result<(), ReleaseError> {
        let qs = self.qs;
        match self.exec.as_mut() {
            Some(exec) => qs.release_seats(exec, seats),
            None => Err(ReleaseError::NothingHeld),
        }
    }

    /// Give back every seat it still holds, while it keeps executing.
    pub fn release_all_seats(&mut self) -> Result<(), ReleaseError> {
        let qs = self.qs;
        match self.exec.as_mut() {
            Some(exec) => qs.release_all_seats(exec),
            None => Err(ReleaseError::NothingHeld),
        }
    }

    /// Finish now.
    pub fn finish(self) {}

    /// Finish with `end` as the actual end of execution (not before the
    /// start); seats held for additional latency are counted from it.
    pub fn finish_at(mut self, end: Instant) {
        if let Some(exec) = self.exec.take() {
            self.qs.finish_execution(exec, end);
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // Finished in place, by reference: the guard is going away, so
        // its execution is given up here (no `take`, which would move the
        // held request out first).
        if let Some(exec) = &self.exec {
            let now = self.qs.shared.clock.now();
            self.qs.finish_execution_now(exec, now);
        }
    }
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("execution", &self.exec)
            .finish()
    }
}

/// A request waiting in a queue. Wait for it ([`Ticket::wait`]), poll it
/// ([`Ticket::poll`]) or `.await` it; dropping it cancels the request.
#[must_use = "dropping the ticket cancels the request"]
pub struct Ticket<'q> {
    pub(super) qs: &'q QueueSet,
    pub(super) waiting: Option<Waiting>,
}

impl<'q> Ticket<'q> {
    /// Block until the request is dispatched or rejected.
    pub fn wait(mut self) -> Result<Guard<'q>, RejectReason> {
        let waiting = self.waiting.take().expect("a live ticket is waiting");
        let qs = self.qs;
        qs.wait_for(waiting).map(|exec| Guard {
            qs,
            exec: Some(exec),
        })
    }

    /// Without blocking: the decision if there is one.
    pub fn poll(&mut self) -> Option<Result<Guard<'q>, RejectReason>> {
        self.poll_with(None)
    }

    fn poll_with(&mut self, waker: Option<&Waker>) -> Option<Result<Guard<'q>, RejectReason>> {
        let qs = self.qs;
        let decision = qs.poll_waiting(self.waiting.as_ref()?, waker)?;
        self.waiting = None;
        Some(decision.map(|exec| Guard {
            qs,
            exec: Some(exec),
        }))
    }

    /// Give up waiting. Returns false if the request had already been
    /// dispatched (it is then finished at once) or rejected.
    pub fn cancel(mut self) -> bool {
        self.waiting
            .take()
            .is_some_and(|w| self.qs.cancel_waiting(w))
    }
}

impl<'q> Future for Ticket<'q> {
    type Output = Result<Guard<'q>, RejectReason>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.waiting.is_none() {
            return Poll::Ready(Err(RejectReason::Cancelled));
        }
        match self.poll_with(Some(cx.waker())) {
            Some(result) => Poll::Ready(result),
            None => Poll::Pending,
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            self.qs.cancel_waiting(waiting);
        }
    }
}

impl fmt::Debug for Ticket<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("pending", &self.waiting.is_some())
            .finish()
    }
}
