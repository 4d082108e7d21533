//! A vector indexed by slot number that grows in fixed chunks.
//!
//! A `Vec` that doubles keeps up to half of its memory unused right after it
//! grows; per-slot arrays here can be large (one element per tracked item),
//! so past their first chunk they grow a chunk at a time instead and waste
//! at most one chunk, and growing never moves (or copies) those chunks. The
//! first chunk's worth of elements is a `Vec` that grows in small steps:
//! a queue has one table per shard, and most shards of a small queue hold
//! a few dozen items, so a whole chunk each would cost more than the items.

const CHUNK_BITS: u32 = 9;
const CHUNK: usize = 1 << CHUNK_BITS;
/// The first chunk's smallest allocation, and how it grows after that.
const HEAD_MIN: usize = 16;
const HEAD_STEP: usize = 64;

pub(crate) struct ChunkVec<V> {
    /// Elements `0..CHUNK`, grown in steps.
    head: Vec<V>,
    /// Elements from `CHUNK` on, in fixed-size chunks: an offset masked to
    /// `CHUNK - 1` needs no bounds check (these arrays are indexed several
    /// times per queue operation).
    chunks: Vec<Box<[V; CHUNK]>>,
}

impl<V: Default> ChunkVec<V> {
    pub(crate) const fn new() -> Self {
        ChunkVec {
            head: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// Add a chunk of `V::default()`s.
    #[cold]
    fn grow(&mut self) {
        let chunk: Box<[V]> = (0..CHUNK).map(|_| V::default()).collect();
        let Ok(chunk) = chunk.try_into() else {
            unreachable!("the iterator yields exactly CHUNK elements")
        };
        self.chunks.push(chunk);
    }

    /// Make the first chunk's `index` addressable: 16 elements, then steps
    /// of 64 (each a reallocation that copies at most a chunk), so a table
    /// that holds a few hundred items wastes at most 63 slots where
    /// doubling would waste up to half.
    #[cold]
    fn grow_head(&mut self, index: usize) {
        let len = if index < HEAD_MIN {
            HEAD_MIN
        } else {
            (index + 1).next_multiple_of(HEAD_STEP).min(CHUNK)
        };
        self.head.reserve_exact(len - self.head.len());
        self.head.resize_with(len, V::default);
    }

    /// The element at `index`, if it was ever made addressable.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&V> {
        if index < CHUNK {
            return self.head.get(index);
        }
        self.chunks
            .get((index >> CHUNK_BITS) - 1)
            .map(|c| &c[index & (CHUNK - 1)])
    }

    /// The element at `index`, growing the vector (filling new elements
    /// with `V::default()`) if needed.
    #[inline]
    pub(crate) fn at(&mut self, index: usize) -> &mut V {
        if index < CHUNK {
            if index >= self.head.len() {
                self.grow_head(index);
            }
            return &mut self.head[index];
        }
        let chunk = (index >> CHUNK_BITS) - 1;
        while chunk >= self.chunks.len() {
            self.grow();
        }
        &mut self.chunks[chunk][index & (CHUNK - 1)]
    }
}

impl<V: Default> Default for ChunkVec<V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn grows_by_chunks_and_keeps_values() {
        let mut v: ChunkVec<u32> = ChunkVec::new();
        assert!(v.get(0).is_none());
        *v.at(3) = 7;
        assert_eq!(v.head.len(), HEAD_MIN, "a small first allocation");
        *v.at(HEAD_MIN + 1) = 8;
        assert_eq!(v.head.len(), HEAD_STEP, "then in steps");
        *v.at(HEAD_STEP) = 8;
        assert_eq!(v.head.len(), 2 * HEAD_STEP);
        *v.at(CHUNK + 1) = 9;
        assert_eq!(v.get(3), Some(&7));
        assert_eq!(v.get(HEAD_MIN + 1), Some(&8));
        assert_eq!(v.get(HEAD_STEP), Some(&8));
        assert_eq!(v.get(CHUNK + 1), Some(&9));
        assert_eq!(v.get(CHUNK), Some(&0));
        assert!(v.get(2 * CHUNK).is_none());
        assert_eq!(v.chunks.len(), 1);
    }
}
