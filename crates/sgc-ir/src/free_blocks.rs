//! The free blocks of one address range, for best-fit allocators: the planner's arena
//! sweep and the run-time DTR pool keep theirs here.
//!
//! Two indexes of the same blocks: by offset (to find a block's neighbours when one is
//! freed) and by `(size, offset)` (to find the smallest block that holds a request, the
//! lowest offset among equal sizes). Both are ordered maps, so every operation is
//! logarithmic in the number of free blocks and the choices are deterministic.

use std::collections::{BTreeMap, BTreeSet};

/// Disjoint free blocks `(offset, len)`; see the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FreeBlocks {
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
}

impl FreeBlocks {
    /// Adds the free block `[offset, offset + len)`; it must not overlap another.
    pub fn insert(&mut self, offset: u64, len: u64) {
        self.by_offset.insert(offset, len);
        self.by_size.insert((len, offset));
    }

    fn remove(&mut self, offset: u64, len: u64) {
        self.by_offset.remove(&offset);
        self.by_size.remove(&(len, offset));
    }

    /// Best fit: takes `need` bytes from the start of the smallest block holding them
    /// (the lowest offset among equals), keeping the rest free; `None` when none does.
    pub fn take_best_fit(&mut self, need: u64) -> Option<u64> {
        let &(have, offset) = self.by_size.range((need, 0)..).next()?;
        self.remove(offset, have);
        if have > need {
            self.insert(offset + need, have - need);
        }
        Some(offset)
    }

    /// Removes the free blocks that end at `offset` or start at `offset + len` and returns
    /// the block they make with `[offset, offset + len)`, which is not inserted: the
    /// caller frees it (or, at the top of a growing range, gives it back).
    pub fn merge_neighbours(&mut self, offset: u64, len: u64) -> (u64, u64) {
        let (mut start, mut total) = (offset, len);
        if let Some((&prev, &plen)) = self.by_offset.range(..offset).next_back() {
            if prev + plen == offset {
                self.remove(prev, plen);
                start = prev;
                total += plen;
            }
        }
        if let Some(&nlen) = self.by_offset.get(&(offset + len)) {
            self.remove(offset + len, nlen);
            total += nlen;
        }
        (start, total)
    }

    /// The largest free block's size (0 when none).
    pub fn largest(&self) -> u64 {
        self.by_size.last().map_or(0, |&(s, _)| s)
    }

    /// The free block at `offset`, if one starts there.
    pub fn at(&self, offset: u64) -> Option<u64> {
        self.by_offset.get(&offset).copied()
    }

    /// Every free block `(offset, len)` in address order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_offset.iter().map(|(&o, &l)| (o, l))
    }

    /// Whether the two indexes hold the same blocks (an invariant check).
    pub fn consistent(&self) -> bool {
        self.by_offset.len() == self.by_size.len()
            && self.iter().all(|(o, l)| self.by_size.contains(&(l, o)))
    }

    pub fn clear(&mut self) {
        self.by_offset.clear();
        self.by_size.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_takes_the_smallest_block_then_the_lowest_offset() {
        let mut f = FreeBlocks::default();
        f.insert(0, 8);
        f.insert(20, 4);
        f.insert(40, 4);
        assert_eq!(f.take_best_fit(3), Some(20));
        assert_eq!(f.at(23), Some(1));
        assert_eq!(f.take_best_fit(4), Some(40));
        assert_eq!(f.take_best_fit(9), None);
        assert_eq!(f.largest(), 8);
        assert!(f.consistent());
    }

    #[test]
    fn freed_blocks_merge_with_their_neighbours() {
        let mut f = FreeBlocks::default();
        f.insert(0, 4);
        f.insert(10, 6);
        assert_eq!(f.merge_neighbours(4, 6), (0, 16));
        assert_eq!(f.iter().count(), 0);
        f.insert(0, 16);
        assert_eq!(f.merge_neighbours(20, 2), (20, 2));
        assert!(f.consistent());
    }
}
