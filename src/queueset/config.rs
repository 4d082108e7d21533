//! Configuration of one queueset, and its validation.

use crate::dealer::{self, DealerError};
use std::fmt;
use std::time::Duration;

/// The largest concurrency limit a queueset accepts (the admission word
/// keeps seats in 31 bits).
pub const MAX_CONCURRENCY_LIMIT: u32 = 1 << 30;

/// How one priority level queues and dispatches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSetConfig {
    /// The priority level's name, for errors, metrics and dumps.
    pub name: String,
    /// Seats that may be in use at once (Kubernetes' CurrentCL).
    pub concurrency_limit: u32,
    /// Number of queues; 0 means no queuing: a request that does not fit is
    /// rejected at once (Kubernetes' limit response `Reject`).
    pub queues: u32,
    /// Queues dealt to each flow (shuffle sharding).
    pub hand_size: u32,
    /// Requests a queue may hold before newcomers are rejected (when the
    /// level has no free seat).
    pub queue_length_limit: u32,
    /// G: the initial guess of a request's service time, charged in virtual
    /// time at dispatch and corrected at finish.
    pub service_time_guess: Duration,
    /// The longest a request may wait in a queue before it is rejected with
    /// reason time-out.
    pub wait_limit: Duration,
    /// How the level shares its seats among flows (see [`Fairness`]).
    pub fairness: Fairness,
}

/// How a queuing level shares its seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fairness {
    /// Kubernetes' queueset, bit for bit: queues compete fairly, so a flow
    /// with many concurrent requests spreads over its whole hand and gets
    /// up to hand-size shares.
    #[default]
    Kubernetes,
    /// Flow-fair: a flow with requests waiting or executing keeps to one
    /// queue of its hand, so each flow (not each queue) gets a max-min
    /// fair share of the seats (docs/flow-fairness.md).
    Flow,
    /// `Flow`, with max-min allocation among queues (Kubernetes issue
    /// 95979): R advances at the water level of the active queues'
    /// demands instead of Kubernetes' equal division, so a queue that
    /// asks for less than an equal share earns no credit for the rest
    /// (docs/flow-fairness.md).
    FlowMaxMin,
}

impl Fairness {
    /// Every policy, in declaration order.
    pub const ALL: [Fairness; 3] = [Fairness::Kubernetes, Fairness::Flow, Fairness::FlowMaxMin];

    /// The policy's name in configuration (`kubernetes`, `flow`).
    pub fn as_str(self) -> &'static str {
        match self {
            Fairness::Kubernetes => "kubernetes",
            Fairness::Flow => "flow",
            Fairness::FlowMaxMin => "flow-maxmin",
        }
    }

    /// Whether a busy flow keeps to one queue (and anticipation applies).
    #[inline]
    pub fn is_flow(self) -> bool {
        matches!(self, Fairness::Flow | Fairness::FlowMaxMin)
    }

    /// Whether R advances at the max-min water level among queues.
    #[inline]
    pub fn is_max_min(self) -> bool {
        self == Fairness::FlowMaxMin
    }

    /// The policy named `name` (as [`Fairness::as_str`] spells it).
    pub fn from_name(name: &str) -> Option<Fairness> {
        Fairness::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

impl fmt::Display for Fairness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Default for QueueSetConfig {
    /// Kubernetes' defaults for a queuing level: 64 queues, hand size 8,
    /// queue length limit 50, G = 3 ms, 15 s wait limit.
    fn default() -> Self {
        QueueSetConfig {
            name: String::new(),
            concurrency_limit: 1,
            queues: 64,
            hand_size: 8,
            queue_length_limit: 50,
            service_time_guess: Duration::from_millis(3),
            wait_limit: Duration::from_secs(15),
            fairness: Fairness::Kubernetes,
        }
    }
}

/// Why a [`QueueSetConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSetConfigError {
    /// Queues and hand size do not make a valid shuffle-sharding dealer.
    Dealer {
        /// The level's name.
        level: String,
        /// What is wrong with its queues and hand size.
        error: DealerError,
    },
    /// A queuing level needs a queue length limit of at least 1.
    QueueLengthLimit {
        /// The level's name.
        level: String,
    },
    /// G must be positive.
    ServiceTimeGuess {
        /// The level's name.
        level: String,
    },
    /// The concurrency limit is above [`MAX_CONCURRENCY_LIMIT`].
    ConcurrencyLimit {
        /// The level's name.
        level: String,
        /// The limit given.
        limit: u32,
    },
    /// The level failed (a panic inside its critical section) and takes no
    /// new configuration; replace it with a new queueset.
    LevelFailed {
        /// The level's name.
        level: String,
    },
}

impl fmt::Display for QueueSetConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dealer { level, error } => write!(f, "priority level {level:?}: queues/handSize: {error}"),
            Self::QueueLengthLimit { level } => {
                write!(f, "priority level {level:?}: queueLengthLimit must be positive when queuing")
            }
            Self::ServiceTimeGuess { level } => {
                write!(f, "priority level {level:?}: the service time guess G must be positive")
            }
            Self::ConcurrencyLimit { level, limit } => write!(
                f,
                "priority level {level:?}: concurrency limit {limit} is above the maximum {MAX_CONCURRENCY_LIMIT}"
            ),
            Self::LevelFailed { level } => write!(
                f,
                "priority level {level:?} failed (a panic inside its critical section) and takes no new configuration"
            ),
        }
    }
}

impl std::error::Error for QueueSetConfigError {}

/// The longest the flow policy holds a finished request's seats for its
/// flow's next request (see [`QueueSetConfig::anticipation`]).
pub const MAX_ANTICIPATION: Duration = Duration::from_millis(10);

impl QueueSetConfig {
    /// How long the flow policy may hold a finished request's seats for its
    /// flow's next request: G, capped at [`MAX_ANTICIPATION`] (a large G
    /// must not idle seats for long). None under Kubernetes' policy.
    pub fn anticipation(&self) -> Option<Duration> {
        self.fairness
            .is_flow()
            .then(|| self.service_time_guess.min(MAX_ANTICIPATION))
    }

    /// Check the configuration, returning the dealer it implies (None when
    /// not queuing).
    pub fn validate(&self) -> Result<Option<dealer::Dealer>, QueueSetConfigError> {
        let level = || self.name.clone();
        if self.concurrency_limit > MAX_CONCURRENCY_LIMIT {
            return Err(QueueSetConfigError::ConcurrencyLimit {
                level: level(),
                limit: self.concurrency_limit,
            });
        }
        if self.service_time_guess.is_zero() {
            return Err(QueueSetConfigError::ServiceTimeGuess { level: level() });
        }
        if self.queues == 0 {
            return Ok(None);
        }
        if self.queue_length_limit == 0 {
            return Err(QueueSetConfigError::QueueLengthLimit { level: level() });
        }
        dealer::Dealer::new(self.queues, self.hand_size)
            .map(Some)
            .map_err(|error| QueueSetConfigError::Dealer {
                level: level(),
                error,
            })
    }
}
