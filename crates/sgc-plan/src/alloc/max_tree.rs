//! A max tree over a row of values (all 0 at first): set one, or list those before a
//! position that are above a bound, in order, skipping every subtree whose maximum is not
//! above it. Greedy placement keeps the end of each placed buffer by start (which placed
//! buffers a new one overlaps in time); validation keeps the highest end of each offset
//! slot (which live buffers a new one meets in space).

/// The tree: leaves from `size`, each inner node the maximum of its two children.
pub(super) struct MaxTree {
    max: Vec<u64>,
    size: usize,
}

impl MaxTree {
    /// A tree over `len` values, all 0.
    pub(super) fn new(len: usize) -> Self {
        let size = len.next_power_of_two().max(1);
        MaxTree {
            max: vec![0; 2 * size],
            size,
        }
    }

    /// Sets value `k`.
    pub(super) fn set(&mut self, k: usize, value: u64) {
        let mut node = self.size + k;
        self.max[node] = value;
        while node > 1 {
            node /= 2;
            self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
        }
    }

    /// Calls `each` on every `k` below `limit` whose value is above `bound`, in increasing
    /// order.
    pub(super) fn above(&self, limit: usize, bound: u64, each: &mut impl FnMut(usize)) {
        self.visit(1, 0, self.size, limit, bound, each);
    }

    fn visit(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        limit: usize,
        bound: u64,
        each: &mut impl FnMut(usize),
    ) {
        if lo >= limit || self.max[node] <= bound {
            return;
        }
        if node >= self.size {
            each(lo);
            return;
        }
        let mid = (lo + hi) / 2;
        self.visit(2 * node, lo, mid, limit, bound, each);
        self.visit(2 * node + 1, mid, hi, limit, bound, each);
    }
}
