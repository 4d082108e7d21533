//! Randomised schedules of the queueset with shuttle, for runs too large
//! for loom: many threads on one level's hot and slow paths, the slow
//! path's history replayed into the reference model (`paths`), and the
//! sharded event rings and seat budgets (`shards`). Run with
//! `scripts/shuttle.sh` (SHUTTLE_ITERATIONS for longer runs).

mod paths;
mod shards;
