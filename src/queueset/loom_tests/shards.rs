//! loom models of the sharded event rings (src/queueset/shards.rs): a
//! request admitted on one thread's shard and finished on another thread,
//! racing the lock holder's drain of both rings; and of the shards' seat
//! budgets (src/queueset/budget.rs) through the queueset: a refill and a
//! return racing a slow-path waiter that fences and sweeps, and a limit
//! change with seats parked. Run with `scripts/loom.sh` (two shards under
//! loom; the first thread of a model run that admits gets shard 0, the
//! next shard 1; a limit of 8 gives budgets of one seat, a limit under 8
//! none).
use super::{assert_idle, config};
use crate::clock::Clock;
use crate::queueset::{Execution, QueueSet, RawAdmission, Request};
use loom::sync::Arc;
use loom::thread;

/// A level of `limit` seats and two queues, and its clock (which the models
/// read, never move).
fn level(limit: u32) -> (Arc<QueueSet>, Clock) {
    let (qs, _) = super::level(config(limit, 2));
    let clock = qs.clock().clone();
    (qs, clock)
}

/// A one-seat request of `flow`.
fn request(flow: u64) -> Request {
    super::request(flow, 1)
}

/// Seats executing requests hold, as the model's threads saw them: at
/// every admission the level must be within its limit.
struct Executing {
    limit: u32,
    seats: loom::sync::Mutex<u32>,
}

impl Executing {
    fn began(&self, seats: u32) {
        let mut n = self.seats.lock().unwrap();
        *n += seats;
        assert!(
            *n <= self.limit,
            "{} seats execute at limit {}",
            *n,
            self.limit
        );
    }

    fn ending(&self, seats: u32) {
        *self.seats.lock().unwrap() -= seats;
    }
}

/// Admit (waiting if queued); the execution, observed as begun.
fn run_to_start(qs: &QueueSet, seen: &Executing, r: &Request) -> Option<Execution> {
    let exec = match qs.admit(r) {
        RawAdmission::Execute(e) => e,
        RawAdmission::Queued(w) => qs.wait_for(w).ok()?,
        RawAdmission::Rejected(_) => return None,
    };
    seen.began(r.estimate.max_seats());
    Some(exec)
}

fn end(qs: &QueueSet, seen: &Executing, exec: Execution, clock: &Clock) {
    seen.ending(exec.estimate().max_seats());
    qs.finish_execution(exec, clock.now());
}

/// A request starts on shard 0 and finishes on a thread of shard 1, which
/// then starts and finishes its own request, all at one instant (a manual
/// clock), while the first thread drains both rings. The finish must be
/// replayed after its start in every interleaving: had it gone to the
/// finishing thread's ring, the merge (finishes first on a tie) would
/// replay it before its start and the core's counts would underflow.
#[test]
fn finish_on_another_shard_against_drain() {
    loom::model(|| {
        let (qs, clock) = level(2);
        let RawAdmission::Execute(exec) = qs.admit(&request(1)) else {
            panic!("free seats: the hot path admits");
        };
        let other = qs.clone();
        let other_clock = clock.clone();
        let t = thread::spawn(move || {
            other.finish_execution(exec, other_clock.now());
            let RawAdmission::Execute(own) = other.admit(&request(2)) else {
                panic!("free seats: the hot path admits");
            };
            other.finish_execution(own, other_clock.now());
        });
        // The lock holder's drain races both pushes.
        let stats = qs.stats();
        assert!(stats.seats_in_use <= 2, "never above the limit");
        t.join().unwrap();
        assert_idle(&qs);
    });
}

/// Two shards each fill their ring (two records under loom) while the
/// other replays: every record is replayed once, whichever thread finds
/// its ring full.
#[test]
fn full_rings_on_two_shards() {
    loom::model(|| {
        let (qs, clock) = level(2);
        let other = qs.clone();
        let other_clock = clock.clone();
        let t = thread::spawn(move || {
            for flow in [3, 4] {
                let RawAdmission::Execute(e) = other.admit(&request(flow)) else {
                    panic!("at most two requests execute at once here");
                };
                other.finish_execution(e, other_clock.now());
            }
        });
        let RawAdmission::Execute(e) = qs.admit(&request(1)) else {
            panic!("at most two requests execute at once here");
        };
        qs.finish_execution(e, clock.now());
        t.join().unwrap();
        assert_idle(&qs);
    });
}

/// Seat budgets (limit 8: one seat each): a 6-seat request holds most of
/// the level; another thread (shard 1) draws a budget (its request plus
/// one parked seat: the level is full), finishes (a return: two parked)
/// and then finishes the wide request, while this thread's 2-seat request
/// takes the slow path, which fences and sweeps the budgets and queues it
/// if they do not free enough. In every interleaving the level stays
/// within its limit, the queued request is dispatched once the others
/// finish (a seat left parked would leave it waiting: loom reports the
/// deadlock), and every seat comes back.
#[test]
fn budget_refill_and_return_against_a_queued_request() {
    loom::model(|| {
        let (qs, clock) = level(8);
        let seen = Arc::new(Executing {
            limit: 8,
            seats: loom::sync::Mutex::new(0),
        });
        let big = run_to_start(&qs, &seen, &super::request(1, 6)).expect("an idle level admits");
        let (other, other_seen, other_clock) = (qs.clone(), seen.clone(), clock.clone());
        let t = thread::spawn(move || {
            if let Some(e) = run_to_start(&other, &other_seen, &request(2)) {
                end(&other, &other_seen, e, &other_clock);
            }
            end(&other, &other_seen, big, &other_clock);
        });
        let mine =
            run_to_start(&qs, &seen, &super::request(3, 2)).expect("queued, then dispatched");
        end(&qs, &seen, mine, &clock);
        t.join().unwrap();
        assert_idle(&qs);
    });
}

/// A limit change (8 to 2: budgets off) while this thread's budget holds
/// parked seats and a request on the other shard starts and finishes: the
/// change sweeps them back, and the two requests this thread starts after
/// it never run beside the other one above the new limit (the second
/// waits for a seat if the other request still runs). Every seat comes
/// back.
#[test]
fn a_limit_change_with_budgets_outstanding() {
    loom::model(|| {
        let (qs, clock) = level(8);
        let seen = Arc::new(Executing {
            limit: 8,
            seats: loom::sync::Mutex::new(0),
        });
        // This thread's shard draws one seat plus a parked one, and parks
        // the request's seat too when it finishes.
        let first = run_to_start(&qs, &seen, &request(1)).expect("an idle level admits");
        end(&qs, &seen, first, &clock);
        let (other, other_seen, other_clock) = (qs.clone(), seen.clone(), clock.clone());
        let t = thread::spawn(move || {
            if let Some(e) = run_to_start(&other, &other_seen, &request(2)) {
                end(&other, &other_seen, e, &other_clock);
            }
        });
        qs.set_concurrency_limit(2).expect("a valid limit");
        let low = Executing {
            limit: 2,
            seats: loom::sync::Mutex::new(0),
        };
        // The other thread's request counts against the new limit if it
        // runs; the word knows, the model's counter for this thread only
        // sees its own, so compare the word's count of requests instead.
        let a = run_to_start(&qs, &low, &request(3)).expect("a free seat");
        let b = run_to_start(&qs, &low, &request(4)).expect("a seat, maybe after a wait");
        let in_use = qs.stats().seats_in_use;
        assert!(in_use <= 2, "{in_use} seats in use at limit 2");
        end(&qs, &low, a, &clock);
        end(&qs, &low, b, &clock);
        t.join().unwrap();
        assert_idle(&qs);
    });
}
