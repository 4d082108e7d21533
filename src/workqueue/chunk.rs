//! A vector indexed by slot number that grows in fixed chunks.
//!
//! A `Vec` that doubles keeps up to half of its memory unused right after it
//! grows; per-slot arrays here can be large (one element per tracked item),
//! so they grow a chunk at a time instead and waste at most one chunk, and
//! growing never moves (or copies) what is already stored.

const CHUNK_BITS: u32 = 9;
const CHUNK: usize = 1 << CHUNK_BITS;

pub(crate) struct ChunkVec<V> {
    /// Fixed-size chunks: an offset masked to `CHUNK - 1` needs no bounds
    /// check (these arrays are indexed several times per queue operation).
    chunks: Vec<Box<[V; CHUNK]>>,
}

impl<V: Default> ChunkVec<V> {
    pub(crate) const fn new() -> Self {
        ChunkVec { chunks: Vec::new() }
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

    /// The element at `index`, if it was ever made addressable.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&V> {
        self.chunks
            .get(index >> CHUNK_BITS)
            .map(|c| &c[index & (CHUNK - 1)])
    }

    /// The element at `index`, growing the vector (filling new elements
    /// with `V::default()`) if needed.
    #[inline]
    pub(crate) fn at(&mut self, index: usize) -> &mut V {
        let chunk = index >> CHUNK_BITS;
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
        *v.at(CHUNK + 1) = 9;
        assert_eq!(v.get(3), Some(&7));
        assert_eq!(v.get(CHUNK + 1), Some(&9));
        assert_eq!(v.get(CHUNK), Some(&0));
        assert!(v.get(2 * CHUNK).is_none());
        assert_eq!(v.chunks.len(), 2);
    }
}
