//! The work a request is estimated to take (placeholder: the estimator lands from the `borrowing` branch).
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkEstimate {
    pub initial_seats: u32,
    pub final_seats: u32,
    pub additional_latency: Duration,
}

impl WorkEstimate {
    pub fn new(initial_seats: u32, final_seats: u32, additional_latency: Duration) -> Self {
        WorkEstimate {
            initial_seats,
            final_seats,
            additional_latency,
        }
    }
    pub fn max_seats(&self) -> u32 {
        self.initial_seats.max(self.final_seats)
    }
}
