//! The workqueue strategies against plain models of client-go's rules:
//! any sequence of operations (add, delayed add, try-get, done, clock
//! advance, shutdown) must give the same result for every call and the same
//! queued, waiting and tracked counts after every step. Shared by the
//! property tests (`tests.rs`) and the cargo-fuzz target
//! (`fuzz/fuzz_targets/workqueue.rs`), which is why it is public but hidden.

use super::core::{Mode, Shared};
use super::{
    Fifo, Lane, Priority, QueueConfig, QueueStrategy, TryGetError, Workqueue, WorkqueueError,
};
use crate::clock::Clock;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Keys are `0..KEYS`: few enough that operations collide on them.
pub const KEYS: u8 = 6;

/// One operation; its numbers are reduced into range where used.
#[derive(Clone, Debug)]
pub enum Op {
    /// Add key with hint.
    Add(u8, u8),
    /// Add key with hint after a delay in milliseconds (0..5).
    AddAfter(u8, u8, u8),
    TryGet,
    Done(u8),
    /// Advance the clock by 0..4 ms.
    Advance(u8),
    ShutDown,
}

impl Op {
    /// Decode one operation from the front of `bytes` (fuzzing input).
    pub fn decode(bytes: &mut &[u8]) -> Option<Op> {
        let (&tag, rest) = bytes.split_first()?;
        *bytes = rest;
        let mut next = || -> Option<u8> {
            let (&b, rest) = bytes.split_first()?;
            *bytes = rest;
            Some(b)
        };
        Some(match tag % 17 {
            0..=3 => Op::Add(next()? % KEYS, next()? % 4),
            4..=6 => Op::AddAfter(next()? % KEYS, next()? % 4, next()? % 5),
            7..=10 => Op::TryGet,
            11..=13 => Op::Done(next()? % KEYS),
            14..=15 => Op::Advance(next()? % 4),
            _ => Op::ShutDown,
        })
    }
}

/// Which queue the operations run on.
#[derive(Copy, Clone, Debug)]
pub enum Kind {
    /// A FIFO with delayed adds (client-go's delaying queue).
    DelayingFifo,
    TwoLane,
    /// Priorities, delayed adds independent of ready ones.
    IndependentPriorities,
    /// controller-runtime's priority queue: a delayed add of a queued item
    /// merges with it.
    PriorityQueue,
}

impl Kind {
    pub fn decode(b: u8) -> Kind {
        match b % 4 {
            0 => Kind::DelayingFifo,
            1 => Kind::TwoLane,
            2 => Kind::IndependentPriorities,
            _ => Kind::PriorityQueue,
        }
    }
}

/// Run `ops` on `kind` and on its model; the first difference, described.
pub fn check(kind: Kind, ops: &[Op]) -> Result<(), String> {
    match kind {
        Kind::DelayingFifo => run::<FifoModel, Fifo, ()>(false, Fifo::default(), ops),
        Kind::TwoLane => {
            run::<RankedModel<true>, super::TwoLane, Lane>(false, super::TwoLane::default(), ops)
        }
        Kind::IndependentPriorities => {
            run::<RankedModel<false>, Priority, i32>(false, Priority::default(), ops)
        }
        Kind::PriorityQueue => {
            run::<RankedModel<false>, Priority, i32>(true, Priority::default(), ops)
        }
    }
}

macro_rules! same {
    ($step:expr, $what:expr, $queue:expr, $model:expr) => {{
        let (queue, model) = ($queue, $model);
        if queue != model {
            return Err(format!(
                "step {} ({:?}): {}: queue {:?}, model {:?}",
                $step.0, $step.1, $what, queue, model
            ));
        }
    }};
}

/// What the model of a strategy must do.
trait Order {
    type Hint: Copy + PartialEq + std::fmt::Debug;
    fn hint(h: u8) -> Self::Hint;
    fn push(&mut self, k: u8, h: Self::Hint);
    fn touch(&mut self, k: u8, h: Self::Hint);
    fn pop(&mut self) -> Option<(u8, Self::Hint)>;
    fn contains(&self, k: u8) -> bool;
    fn len(&self) -> usize;
    fn merge(held: Self::Hint, new: Self::Hint) -> Self::Hint;
}

#[derive(Default)]
struct FifoModel(Vec<u8>);

impl Order for FifoModel {
    type Hint = ();
    fn hint(_: u8) {}
    fn push(&mut self, k: u8, _: ()) {
        self.0.push(k);
    }
    fn touch(&mut self, _: u8, _: ()) {}
    fn pop(&mut self) -> Option<(u8, ())> {
        (!self.0.is_empty()).then(|| (self.0.remove(0), ()))
    }
    fn contains(&self, k: u8) -> bool {
        self.0.contains(&k)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn merge(_: (), _: ()) {}
}

/// Items in arrival order with a rank; `pop` takes the first of the
/// best rank.
#[derive(Default)]
struct RankedModel<const LANES: bool>(Vec<(u8, i32)>);

impl<const LANES: bool> RankedModel<LANES> {
    fn position(&self, k: u8) -> Option<usize> {
        self.0.iter().position(|&(x, _)| x == k)
    }
}

impl Order for RankedModel<true> {
    type Hint = Lane;
    fn hint(h: u8) -> Lane {
        if h.is_multiple_of(2) {
            Lane::Fast
        } else {
            Lane::Slow
        }
    }
    fn push(&mut self, k: u8, h: Lane) {
        self.0.push((k, i32::from(h == Lane::Fast)));
    }
    fn touch(&mut self, k: u8, h: Lane) {
        let i = self.position(k).unwrap();
        if self.0[i].1 != i32::from(h == Lane::Fast) {
            self.0.remove(i);
            self.push(k, h);
        }
    }
    fn pop(&mut self) -> Option<(u8, Lane)> {
        let best = self.0.iter().map(|e| e.1).max()?;
        let i = self.0.iter().position(|e| e.1 == best).unwrap();
        let (k, r) = self.0.remove(i);
        Some((k, if r == 1 { Lane::Fast } else { Lane::Slow }))
    }
    fn contains(&self, k: u8) -> bool {
        self.position(k).is_some()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn merge(_: Lane, new: Lane) -> Lane {
        new
    }
}

impl Order for RankedModel<false> {
    type Hint = i32;
    fn hint(h: u8) -> i32 {
        i32::from(h) - 1
    }
    fn push(&mut self, k: u8, h: i32) {
        self.0.push((k, h));
    }
    fn touch(&mut self, k: u8, h: i32) {
        let i = self.position(k).unwrap();
        if h > self.0[i].1 {
            self.0.remove(i);
            self.push(k, h);
        }
    }
    fn pop(&mut self) -> Option<(u8, i32)> {
        let best = self.0.iter().map(|e| e.1).max()?;
        let i = self.0.iter().position(|e| e.1 == best).unwrap();
        Some(self.0.remove(i))
    }
    fn contains(&self, k: u8) -> bool {
        self.position(k).is_some()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn merge(held: i32, new: i32) -> i32 {
        held.max(new)
    }
}

/// client-go's rules written out naively, with either add policy.
struct Model<O: Order> {
    merged: bool,
    order: O,
    processing: HashSet<u8>,
    /// Dirty while processing, with the hint to queue it with.
    deferred: HashMap<u8, O::Hint>,
    /// key -> (ready at, first-add sequence, hint)
    waiting: HashMap<u8, (u64, u64, O::Hint)>,
    seq: u64,
    now: u64,
    shut: bool,
}

impl<O: Order + Default> Model<O> {
    fn new(merged: bool) -> Self {
        Model {
            merged,
            order: O::default(),
            processing: HashSet::new(),
            deferred: HashMap::new(),
            waiting: HashMap::new(),
            seq: 0,
            now: 0,
            shut: false,
        }
    }

    fn add(&mut self, k: u8, h: O::Hint) {
        if !self.shut {
            self.ready(k, h);
        }
    }

    fn ready(&mut self, k: u8, h: O::Hint) {
        if self.order.contains(k) {
            self.order.touch(k, h);
        } else if let Some(held) = self.deferred.get_mut(&k) {
            *held = O::merge(*held, h);
        } else {
            let mut h = h;
            if self.merged {
                if let Some((_, _, waited)) = self.waiting.remove(&k) {
                    h = O::merge(waited, h);
                }
            }
            if self.processing.contains(&k) {
                self.deferred.insert(k, h);
            } else {
                self.order.push(k, h);
            }
        }
    }

    fn add_after(&mut self, k: u8, h: O::Hint, d: u64) {
        if self.shut {
            return;
        }
        if d == 0 {
            return self.add(k, h);
        }
        if self.merged && (self.order.contains(k) || self.deferred.contains_key(&k)) {
            return self.ready(k, h);
        }
        let at = self.now + d;
        match self.waiting.get_mut(&k) {
            Some(w) => {
                w.0 = w.0.min(at);
                w.2 = O::merge(w.2, h);
            }
            None => {
                self.waiting.insert(k, (at, self.seq, h));
                self.seq += 1;
            }
        }
    }

    fn try_get(&mut self) -> Result<(u8, O::Hint), TryGetError> {
        match self.order.pop() {
            Some((k, h)) => {
                self.processing.insert(k);
                Ok((k, h))
            }
            None if self.shut => Err(TryGetError::ShutDown),
            None => Err(TryGetError::Empty),
        }
    }

    fn done(&mut self, k: u8) -> Result<(), WorkqueueError> {
        if !self.processing.remove(&k) {
            return Err(WorkqueueError::NotProcessing);
        }
        if let Some(h) = self.deferred.remove(&k) {
            self.order.push(k, h);
        }
        Ok(())
    }

    fn advance(&mut self, d: u64) {
        let target = self.now + d;
        loop {
            let next = self
                .waiting
                .iter()
                .filter(|(_, w)| w.0 <= target)
                .min_by_key(|(_, w)| (w.0, w.1))
                .map(|(&k, &w)| (k, w));
            let Some((k, (at, _, h))) = next else {
                break;
            };
            self.now = at;
            self.waiting.remove(&k);
            self.ready(k, h);
        }
        self.now = target;
    }

    fn shut_down(&mut self) {
        self.shut = true;
        self.waiting.clear();
    }
}

/// Run `ops` on a real queue and on the model, comparing every observable
/// result.
fn run<O: Order<Hint = H> + Default, S: QueueStrategy<u8, Hint = H>, H>(
    merged: bool,
    strategy: S,
    ops: &[Op],
) -> Result<(), String>
where
    H: Copy + PartialEq + std::fmt::Debug + Default + Send + Sync + 'static,
{
    let (clock, manual) = Clock::manual();
    let config = QueueConfig::with_clock(clock).named("differential");
    let mode = if merged {
        Mode::Merged
    } else {
        Mode::Independent
    };
    let q = Workqueue::build(config, strategy, mode);
    Shared::install_timer(q.shared());
    let mut m: Model<O> = Model::new(merged);
    for (i, op) in ops.iter().enumerate() {
        let step = (i, op);
        match *op {
            Op::Add(k, h) => {
                q.add_with(k, O::hint(h));
                m.add(k, O::hint(h));
            }
            Op::AddAfter(k, h, d) => {
                let delay = u64::from(d) * 1_000_000;
                q.shared().add_after(k, delay, O::hint(h), false);
                m.add_after(k, O::hint(h), delay);
            }
            Op::TryGet => same!(step, "try_get", q.try_get_with_hint(), m.try_get()),
            Op::Done(k) => same!(step, "done", q.done(&k), m.done(k)),
            Op::Advance(d) => {
                let d = u64::from(d) * 1_000_000;
                manual.advance(Duration::from_nanos(d));
                m.advance(d);
            }
            Op::ShutDown => {
                q.shut_down();
                m.shut_down();
            }
        }
        same!(step, "len", q.len(), m.order.len());
        same!(step, "waiting", q.shared().waiting_len(), m.waiting.len());
        let tracked: HashSet<u8> = m
            .processing
            .iter()
            .chain(m.waiting.keys())
            .copied()
            .chain((0..KEYS).filter(|&k| m.order.contains(k)))
            .collect();
        same!(step, "tracked", q.tracked(), tracked.len());
    }
    q.shut_down();
    Ok(())
}
