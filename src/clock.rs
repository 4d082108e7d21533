//! Time for everything time-dependent: the real monotonic clock, and a
//! manual clock that tests, the simulator and the C ABI advance by hand.
//!
//! Besides reading the time, a clock runs *timers*: each timer has at most
//! one pending deadline, and its callback runs once the clock reaches it. The
//! dispatcher arms one timer per priority level (for wait limits, request
//! deadlines and seats held for additional latency), so the number of timers
//! is small and a timer never allocates after it is created. Under the manual
//! clock, [`ManualClock::advance`] fires due timers in deadline order at their
//! exact deadlines, which makes every time-dependent behaviour deterministic.

use crate::sync::{lock, thread, Arc, AtomicU64, Condvar, Mutex, Ordering};
use std::fmt;
use std::time::Duration;

/// A point in time: nanoseconds since the clock's epoch.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The clock's epoch.
    pub const ZERO: Instant = Instant(0);
    /// Later than any instant a clock will reach.
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// The instant `nanos` nanoseconds after the clock's epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the clock's epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Instant::FAR_FUTURE`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(d)))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Instant::FAR_FUTURE {
            f.write_str("Instant(never)")
        } else {
            write!(
                f,
                "Instant({}.{:09}s)",
                self.0 / 1_000_000_000,
                self.0 % 1_000_000_000
            )
        }
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A clock: real or manual. Cloning shares the clock.
#[derive(Clone)]
pub struct Clock {
    kind: Kind,
    timers: Arc<TimerTable>,
}

#[derive(Clone)]
enum Kind {
    /// The monotonic clock's reading (see [`monotonic_nanos`]) at the epoch.
    Real(u64),
    Manual(Arc<AtomicU64>),
}

/// The system's monotonic clock in nanoseconds (the clock
/// `std::time::Instant` reads too).
///
/// On Linux this reads `CLOCK_MONOTONIC` directly: the admission hot path
/// reads the clock twice per request, and going through
/// `std::time::Instant::elapsed` spends about 60 instructions per read on
/// checked `timespec` arithmetic around the same vDSO call.
#[cfg(all(target_os = "linux", not(loom)))]
#[inline]
fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_MONOTONIC is always supported on Linux, so the call
    // only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0, "CLOCK_MONOTONIC is always available");
    // Monotonic readings are non-negative and far below 2^64 ns (584 years).
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(not(all(target_os = "linux", not(loom))))]
fn monotonic_nanos() -> u64 {
    use std::sync::OnceLock;
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    duration_nanos(BASE.get_or_init(std::time::Instant::now).elapsed())
}

impl Clock {
    /// The real monotonic clock; its epoch is the moment of this call.
    pub fn real() -> Clock {
        Clock {
            kind: Kind::Real(monotonic_nanos()),
            timers: Arc::new(TimerTable::default()),
        }
    }

    /// A manual clock at [`Instant::ZERO`], and the handle that advances it.
    pub fn manual() -> (Clock, ManualClock) {
        let now = Arc::new(AtomicU64::new(0));
        let clock = Clock {
            kind: Kind::Manual(now),
            timers: Arc::new(TimerTable::default()),
        };
        (clock.clone(), ManualClock { clock })
    }

    /// The current time.
    #[inline]
    pub fn now(&self) -> Instant {
        match &self.kind {
            Kind::Real(epoch) => Instant(monotonic_nanos().saturating_sub(*epoch)),
            // Acquire pairs with the Release in `advance`, so a reader that
            // sees the new time also sees what timers did before it.
            Kind::Manual(now) => Instant(now.load(Ordering::Acquire)),
        }
    }

    /// The time the clock will reach before anything else can happen: now
    /// for the real clock; for a manual clock, inside a timer's callback,
    /// the target of the advance that fired it or the next deadline of
    /// another timer, whichever is earlier (the callback's own timer is
    /// disarmed while it runs). A periodic timer uses it to coalesce periods
    /// that one large advance jumps over, with nothing happening in
    /// between, into one firing, as a periodic task on the real clock would
    /// after a long stall.
    pub fn horizon(&self) -> Instant {
        match &self.kind {
            Kind::Real(_) => self.now(),
            Kind::Manual(now) => {
                let now = now.load(Ordering::Acquire);
                let target = self.timers.horizon.load(Ordering::Acquire);
                let next = self.timers.earliest().unwrap_or(NO_DEADLINE);
                Instant(target.min(next).max(now))
            }
        }
    }

    /// Whether this is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.kind, Kind::Manual(_))
    }

    /// A new timer whose callback runs (on the clock's timer thread for the
    /// real clock, inside [`ManualClock::advance`] for the manual one) once
    /// the clock reaches the timer's deadline.
    ///
    /// The callback must not block for long: all timers of a clock share one
    /// thread.
    pub fn timer(&self, callback: impl Fn(Instant) + Send + Sync + 'static) -> Timer {
        let shared = Arc::new(TimerShared {
            deadline: AtomicU64::new(NO_DEADLINE),
            callback: Box::new(callback),
        });
        lock(&self.timers.entries).push(shared.clone());
        Timer {
            shared,
            clock: self.clone(),
        }
    }

    fn wake_timer_thread(&self, deadline: u64) {
        let Kind::Real(epoch) = &self.kind else {
            return;
        };
        let table = &self.timers;
        let mut state = lock(&table.thread);
        if state.running {
            if deadline < state.sleeping_until {
                table.wakeup.notify_one();
            }
            return;
        }
        state.running = true;
        drop(state);
        let (timers, epoch) = (self.timers.clone(), *epoch);
        thread::spawn(move || run_real_timers(timers, epoch));
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_manual() { "manual" } else { "real" };
        write!(f, "Clock({kind}, now={:?})", self.now())
    }
}

/// The handle that moves a manual clock forward.
#[derive(Clone, Debug)]
pub struct ManualClock {
    clock: Clock,
}

impl ManualClock {
    /// The clock this handle drives.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The earliest deadline of an armed timer, if any. A discrete-event
    /// driver advances to it first so that it sees each timer's effects
    /// (dispatches, time-outs) at the timer's own instant.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.clock.timers.earliest().map(Instant)
    }

    /// Move time forward by `d`, firing every timer that falls due on the
    /// way, each at its own deadline, in deadline order.
    pub fn advance(&self, d: Duration) {
        let target = self.clock.now().saturating_add(d);
        self.advance_to(target);
    }

    /// Move time forward to `target` (never backward), firing due timers.
    pub fn advance_to(&self, target: Instant) {
        let Kind::Manual(now) = &self.clock.kind else {
            unreachable!("ManualClock wraps a manual clock")
        };
        // Serialise advancers so timers fire in order even when two threads
        // advance at once.
        let _advancing = lock(&self.clock.timers.advancing);
        // Published before any timer fires, so a periodic timer can see how
        // far this advance goes and skip the periods it would only repeat.
        self.clock
            .timers
            .horizon
            .fetch_max(target.0, Ordering::AcqRel);
        loop {
            let Some((timer, at)) = self.clock.timers.earliest_due(target.0) else {
                break;
            };
            now.fetch_max(at, Ordering::AcqRel);
            timer.fire_if_due(at);
        }
        now.fetch_max(target.0, Ordering::AcqRel);
    }
}

/// A timer of a [`Clock`]: at most one pending deadline.
pub struct Timer {
    shared: Arc<TimerShared>,
    clock: Clock,
}

impl Timer {
    /// Arm the timer for `deadline`, replacing any earlier setting.
    /// [`Instant::FAR_FUTURE`] means never: the timer is disarmed.
    pub fn set(&self, deadline: Instant) {
        // FAR_FUTURE shares its encoding with "unarmed". Were it armed one
        // nanosecond earlier instead, a manual clock advanced to the end of
        // time would fire it, and a callback that re-arms for the same
        // deadline (the queueset's) would fire for ever.
        let at = deadline.0;
        self.shared.deadline.store(at, Ordering::Release);
        if at != NO_DEADLINE {
            self.clock.wake_timer_thread(at);
        }
    }

    /// Arm the timer for `deadline` unless it is already armed earlier.
    pub fn set_if_earlier(&self, deadline: Instant) {
        let at = deadline.0;
        let prev = self.shared.deadline.fetch_min(at, Ordering::AcqRel);
        if at < prev {
            self.clock.wake_timer_thread(at);
        }
    }

    /// Disarm the timer.
    pub fn cancel(&self) {
        self.shared.deadline.store(NO_DEADLINE, Ordering::Release);
    }

    /// The pending deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        match self.shared.deadline.load(Ordering::Acquire) {
            NO_DEADLINE => None,
            at => Some(Instant(at)),
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.cancel();
        lock(&self.clock.timers.entries).retain(|t| !Arc::ptr_eq(t, &self.shared));
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("deadline", &self.deadline())
            .finish()
    }
}

const NO_DEADLINE: u64 = u64::MAX;

struct TimerShared {
    deadline: AtomicU64,
    callback: Box<dyn Fn(Instant) + Send + Sync>,
}

impl TimerShared {
    /// Run the callback if the timer is still armed for a time at or before
    /// `now`, disarming it first so the callback may re-arm it.
    fn fire_if_due(&self, now: u64) {
        let at = self.deadline.load(Ordering::Acquire);
        if at > now || at == NO_DEADLINE {
            return;
        }
        if self
            .deadline
            .compare_exchange(at, NO_DEADLINE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            (self.callback)(Instant(now));
        }
    }
}

#[derive(Default)]
struct TimerTable {
    entries: Mutex<Vec<Arc<TimerShared>>>,
    advancing: Mutex<()>,
    /// A manual clock's target while `advance_to` runs (see
    /// [`Clock::horizon`]); never decreases.
    horizon: AtomicU64,
    thread: Mutex<TimerThread>,
    wakeup: Condvar,
}

#[derive(Default)]
struct TimerThread {
    running: bool,
    sleeping_until: u64,
}

impl TimerTable {
    /// The armed timer with the earliest deadline at or before `limit`.
    fn earliest_due(&self, limit: u64) -> Option<(Arc<TimerShared>, u64)> {
        let entries = lock(&self.entries);
        entries
            .iter()
            .map(|t| (t, t.deadline.load(Ordering::Acquire)))
            .filter(|&(_, at)| at <= limit && at != NO_DEADLINE)
            .min_by_key(|&(_, at)| at)
            .map(|(t, at)| (t.clone(), at))
    }

    fn earliest(&self) -> Option<u64> {
        let entries = lock(&self.entries);
        entries
            .iter()
            .map(|t| t.deadline.load(Ordering::Acquire))
            .filter(|&at| at != NO_DEADLINE)
            .min()
    }
}

/// The real clock's timer thread: sleeps until the earliest deadline, fires
/// what is due, and exits once no timer is armed (a later `set` respawns it).
fn run_real_timers(table: Arc<TimerTable>, epoch: u64) {
    let now = || monotonic_nanos().saturating_sub(epoch);
    loop {
        while let Some((timer, _)) = table.earliest_due(now()) {
            timer.fire_if_due(now());
        }
        let mut state = lock(&table.thread);
        // Re-read under the thread lock: a `set` that raced with the scan
        // above either sees `running` and notifies after we wait, or its
        // deadline is visible here.
        let Some(next) = table.earliest() else {
            state.running = false;
            return;
        };
        let current = now();
        if next <= current {
            continue;
        }
        state.sleeping_until = next;
        let wait = Duration::from_nanos(next - current);
        let (mut state, _) = match table.wakeup.wait_timeout(state, wait) {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.sleeping_until = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn manual_clock_starts_at_zero_and_advances() {
        let (clock, manual) = Clock::manual();
        assert_eq!(clock.now(), Instant::ZERO);
        manual.advance(Duration::from_millis(5));
        assert_eq!(clock.now(), Instant::from_nanos(5_000_000));
        manual.advance_to(Instant::from_nanos(1));
        assert_eq!(
            clock.now(),
            Instant::from_nanos(5_000_000),
            "never goes backward"
        );
    }

    #[test]
    fn manual_timers_fire_in_order_at_their_deadlines() {
        let (clock, manual) = Clock::manual();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mk = |name: &'static str| {
            let log = log.clone();
            clock.timer(move |at| log.lock().unwrap().push((name, at.as_nanos())))
        };
        let a = mk("a");
        let b = mk("b");
        b.set(Instant::from_nanos(30));
        a.set(Instant::from_nanos(10));
        manual.advance(Duration::from_nanos(20));
        assert_eq!(*log.lock().unwrap(), vec![("a", 10)]);
        assert_eq!(manual.next_deadline(), Some(Instant::from_nanos(30)));
        manual.advance(Duration::from_nanos(20));
        assert_eq!(*log.lock().unwrap(), vec![("a", 10), ("b", 30)]);
        assert_eq!(a.deadline(), None);
        assert_eq!(manual.next_deadline(), None);
    }

    #[test]
    fn a_timer_may_rearm_itself_and_fires_again_within_one_advance() {
        let (clock, manual) = Clock::manual();
        let fired = Arc::new(AtomicUsize::new(0));
        let slot: Arc<Mutex<Option<Arc<Timer>>>> = Arc::new(Mutex::new(None));
        let (f2, s2) = (fired.clone(), slot.clone());
        let timer = Arc::new(clock.timer(move |at| {
            f2.fetch_add(1, Ordering::SeqCst);
            if let Some(t) = s2.lock().unwrap().as_ref() {
                t.set(at.saturating_add(Duration::from_nanos(10)));
            }
        }));
        *slot.lock().unwrap() = Some(timer.clone());
        timer.set(Instant::from_nanos(10));
        manual.advance(Duration::from_nanos(35));
        assert_eq!(fired.load(Ordering::SeqCst), 3, "fires at 10, 20 and 30");
        assert_eq!(timer.deadline(), Some(Instant::from_nanos(40)));
        slot.lock().unwrap().take();
    }

    #[test]
    fn a_timer_set_for_the_far_future_never_fires_even_on_a_saturated_clock() {
        // The queueset re-arms its timer for its next deadline whenever it
        // fires; a deadline of FAR_FUTURE (a saturated wait limit or
        // additional latency) must not make an advance to the end of time
        // fire it again and again.
        let (clock, manual) = Clock::manual();
        let fired = Arc::new(AtomicUsize::new(0));
        let slot: Arc<Mutex<Option<Arc<Timer>>>> = Arc::new(Mutex::new(None));
        let (f2, s2) = (fired.clone(), slot.clone());
        let timer = Arc::new(clock.timer(move |_| {
            // Bounded so that the bug shows as a failure, not a hang.
            if f2.fetch_add(1, Ordering::SeqCst) < 100 {
                if let Some(t) = s2.lock().unwrap().as_ref() {
                    t.set(Instant::FAR_FUTURE);
                }
            }
        }));
        *slot.lock().unwrap() = Some(timer.clone());
        timer.set(Instant::FAR_FUTURE);
        assert_eq!(timer.deadline(), None, "FAR_FUTURE means never");
        timer.set(Instant::from_nanos(10));
        timer.set_if_earlier(Instant::FAR_FUTURE);
        assert_eq!(timer.deadline(), Some(Instant::from_nanos(10)));
        manual.advance(Duration::MAX);
        assert_eq!(clock.now(), Instant::FAR_FUTURE);
        assert_eq!(fired.load(Ordering::SeqCst), 1, "fired at 10 only");
        slot.lock().unwrap().take();
    }

    #[test]
    fn set_if_earlier_keeps_the_earlier_deadline() {
        let (clock, _manual) = Clock::manual();
        let t = clock.timer(|_| {});
        t.set(Instant::from_nanos(50));
        t.set_if_earlier(Instant::from_nanos(70));
        assert_eq!(t.deadline(), Some(Instant::from_nanos(50)));
        t.set_if_earlier(Instant::from_nanos(20));
        assert_eq!(t.deadline(), Some(Instant::from_nanos(20)));
        t.cancel();
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn real_timer_fires_on_the_timer_thread() {
        let clock = Clock::real();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let t = clock.timer(move |at| {
            let _ = lock(&tx).send(at);
        });
        let deadline = clock.now().saturating_add(Duration::from_millis(1));
        t.set(deadline);
        // The real clock's timer thread is the thing under test, so this one
        // test waits on real time; the bound is generous and nothing about
        // timing is asserted beyond "not before the deadline".
        let fired_at = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("timer fired");
        assert!(fired_at >= deadline);
    }
}
