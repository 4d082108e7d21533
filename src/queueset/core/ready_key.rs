//! The key of the ready index (`Core::ready`): a queue's virtual finish
//! time, then its number.
//!
//! `(VTime, usize)` takes 32 bytes because `i128` is 16-byte aligned; this
//! key takes 24, so a B-tree node's keys span fewer cache lines, which is
//! what a dispatch pays for at 16,384 queues (about seven descents of a
//! tree of that many queues per queued-and-dispatched request;
//! docs/benchmarks.md, row f).

use crate::queueset::vtime::VTime;

/// Ordered exactly as `(vf, queue)`: an `i128` compares as its signed high
/// word, then its unsigned low word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ReadyKey {
    hi: i64,
    lo: u64,
    queue: u32,
}

const _: () = assert!(std::mem::size_of::<ReadyKey>() == 24);

impl ReadyKey {
    /// Queue numbers are below `u32::MAX` (they come from `u32`s).
    pub(super) fn new(vf: VTime, queue: usize) -> ReadyKey {
        ReadyKey {
            hi: (vf >> 64) as i64,
            lo: vf as u64,
            queue: u32::try_from(queue).expect("queue numbers fit in u32"),
        }
    }

    /// The virtual finish time.
    pub(super) fn vf(&self) -> VTime {
        (VTime::from(self.hi) << 64) | VTime::from(self.lo)
    }

    pub(super) fn queue(&self) -> usize {
        self.queue as usize
    }

    /// The greatest key with this key's virtual finish time.
    pub(super) fn last_of_vf(&self) -> ReadyKey {
        ReadyKey {
            queue: u32::MAX,
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split key sorts as the `(i128, usize)` pair it replaces, across
    /// the sign and word boundaries, and gives its parts back.
    #[test]
    fn orders_as_the_pair() {
        let vfs: [VTime; 9] = [
            VTime::MIN + 1,
            -(1 << 64) - 1,
            -(1 << 64),
            -1,
            0,
            1,
            (1 << 64) - 1,
            1 << 64,
            VTime::MAX,
        ];
        let mut pairs = Vec::new();
        for &vf in &vfs {
            for q in [0usize, 1, 7, u32::MAX as usize - 1] {
                pairs.push((vf, q));
            }
        }
        for &(a, qa) in &pairs {
            let ka = ReadyKey::new(a, qa);
            assert_eq!((ka.vf(), ka.queue()), (a, qa));
            for &(b, qb) in &pairs {
                assert_eq!(ka.cmp(&ReadyKey::new(b, qb)), (a, qa).cmp(&(b, qb)));
            }
        }
    }
}
