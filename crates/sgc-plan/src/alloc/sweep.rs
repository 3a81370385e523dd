//! Best-fit sweep and the pushdown (gravity) pass.
//!
//! The sweep walks time like a run-time allocator: at each step it frees the buffers that
//! end there (coalescing neighbouring free blocks, and lowering the top when the highest
//! block is freed), then gives each buffer that starts there, largest first, the smallest
//! free block that fits, else the top of the arena.
//!
//! Pushdown takes any valid placement and visits its buffers by offset; each drops to the
//! highest new end among the time-overlapping buffers that were below it (0 if none).
//! Every overlapping pair keeps its vertical order, so the result stays valid and no
//! offset grows: the gaps the sweep leaves (blocks freed too late to be reused) close.

use super::instance::Instance;
use sgc_ir::free_blocks::FreeBlocks;

/// Free blocks of the arena below `top`, and the top, which grows when no block fits.
#[derive(Default)]
struct FreeList {
    blocks: FreeBlocks,
    top: u64,
    peak: u64,
}

impl FreeList {
    /// The smallest free block holding `w` (lowest offset among equals), else the top.
    fn alloc(&mut self, w: u64) -> u64 {
        if let Some(offset) = self.blocks.take_best_fit(w) {
            return offset;
        }
        let offset = self.top;
        self.top += w;
        self.peak = self.peak.max(self.top);
        offset
    }

    fn free(&mut self, offset: u64, len: u64) {
        let (offset, len) = self.blocks.merge_neighbours(offset, len);
        if offset + len == self.top {
            self.top = offset;
        } else {
            self.blocks.insert(offset, len);
        }
    }
}

/// Offsets (units) by a best-fit sweep over time.
pub(crate) fn best_fit_sweep(inst: &Instance) -> Vec<u64> {
    let n = inst.len();
    let mut starts: Vec<usize> = (0..n).filter(|&i| inst.w[i] > 0).collect();
    starts.sort_unstable_by_key(|&i| (inst.lower[i], std::cmp::Reverse(inst.w[i]), i));
    let mut ends: Vec<usize> = starts.clone();
    ends.sort_unstable_by_key(|&i| (inst.upper[i], i));
    let mut offsets = vec![0u64; n];
    let mut free = FreeList::default();
    let mut e = 0;
    for &i in &starts {
        while e < ends.len() && inst.upper[ends[e]] <= inst.lower[i] {
            let j = ends[e];
            free.free(offsets[j], inst.w[j]);
            e += 1;
        }
        offsets[i] = free.alloc(inst.w[i]);
    }
    debug_assert!(free.peak >= inst.lb);
    offsets
}

/// The gravity pass over a valid placement `offsets` (units): see the module docs.
/// Visiting by old offset, every time-overlapping buffer already visited lies below, so a
/// segment tree over time (range max of the new tops) gives each new offset in O(log n).
/// Buffers sharing an offset through an in-place pair keep sharing it.
pub(crate) fn pushdown(inst: &Instance, offsets: &[u64]) -> Vec<u64> {
    let n = inst.len();
    let mut order: Vec<usize> = (0..n).filter(|&i| inst.w[i] > 0).collect();
    order.sort_unstable_by_key(|&i| (offsets[i], i));
    let mut times: Vec<u64> = order
        .iter()
        .flat_map(|&i| [inst.lower[i], inst.upper[i]])
        .collect();
    times.sort_unstable();
    times.dedup();
    let slot = |t: u64| times.partition_point(|&x| x < t);
    let mut tree = MaxTree::new(times.len());
    let mut new = vec![0u64; n];
    let mut g = 0;
    while g < order.len() {
        // A group of buffers with the same old offset: none is below another.
        let at = offsets[order[g]];
        let end = order[g..].partition_point(|&i| offsets[i] == at) + g;
        for &i in &order[g..end] {
            new[i] = tree.max(slot(inst.lower[i]), slot(inst.upper[i]));
        }
        equalise_partners(inst, offsets, &order[g..end], &mut new);
        for &i in &order[g..end] {
            tree.raise(slot(inst.lower[i]), slot(inst.upper[i]), new[i] + inst.w[i]);
        }
        g = end;
    }
    new
}

/// Range "raise to at least x" and range max over slots `[a, b)`.
struct MaxTree {
    size: usize,
    /// Max over the node's range (tags of the node included).
    max: Vec<u64>,
    /// A value the whole range of the node was raised to.
    tag: Vec<u64>,
}

impl MaxTree {
    fn new(slots: usize) -> Self {
        let size = slots.next_power_of_two().max(1);
        MaxTree {
            size,
            max: vec![0; 2 * size],
            tag: vec![0; 2 * size],
        }
    }

    fn max(&self, a: usize, b: usize) -> u64 {
        self.query(1, 0, self.size, a, b)
    }

    fn query(&self, node: usize, lo: usize, hi: usize, a: usize, b: usize) -> u64 {
        if b <= lo || hi <= a {
            return 0;
        }
        if a <= lo && hi <= b {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        let below =
            self.query(2 * node, lo, mid, a, b)
                .max(self.query(2 * node + 1, mid, hi, a, b));
        below.max(self.tag[node])
    }

    fn raise(&mut self, a: usize, b: usize, x: u64) {
        self.update(1, 0, self.size, a, b, x);
    }

    fn update(&mut self, node: usize, lo: usize, hi: usize, a: usize, b: usize, x: u64) {
        if b <= lo || hi <= a {
            return;
        }
        if a <= lo && hi <= b {
            self.tag[node] = self.tag[node].max(x);
            self.max[node] = self.max[node].max(x);
            return;
        }
        let mid = (lo + hi) / 2;
        self.update(2 * node, lo, mid, a, b, x);
        self.update(2 * node + 1, mid, hi, a, b, x);
        self.max[node] = self.max[node].max(self.max[2 * node].max(self.max[2 * node + 1]));
    }
}

/// Raises in-place partners that shared an old offset to the higher of their new offsets,
/// until every such pair agrees (chains of pairs propagate).
fn equalise_partners(inst: &Instance, old: &[u64], group: &[usize], new: &mut [u64]) {
    let mut changed = true;
    while changed {
        changed = false;
        for &i in group {
            for &p in &inst.partners[i] {
                let p = p as usize;
                if inst.w[p] > 0 && old[p] == old[i] && new[p] != new[i] {
                    let m = new[p].max(new[i]);
                    new[p] = m;
                    new[i] = m;
                    changed = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FreeList, MaxTree};

    #[test]
    fn max_tree_raises_ranges() {
        let mut t = MaxTree::new(6);
        t.raise(1, 4, 5);
        t.raise(3, 6, 7);
        assert_eq!(t.max(0, 1), 0);
        assert_eq!(t.max(0, 3), 5);
        assert_eq!(t.max(2, 4), 7);
        assert_eq!(t.max(4, 6), 7);
        t.raise(0, 6, 6);
        assert_eq!(t.max(0, 2), 6);
    }

    #[test]
    fn free_list_coalesces_and_lowers_the_top() {
        let mut f = FreeList::default();
        let a = f.alloc(4);
        let b = f.alloc(2);
        let c = f.alloc(3);
        assert_eq!((a, b, c, f.top), (0, 4, 6, 9));
        f.free(a, 4);
        f.free(b, 2);
        assert_eq!(f.blocks.at(0), Some(6));
        assert_eq!(f.alloc(5), 0);
        f.free(c, 3);
        assert_eq!(f.top, 5); // [5, 6) was free and coalesced too
        assert_eq!(f.peak, 9);
    }
}
