//! Greedy by size with best fit (TFLite's arena planner, XLA's default heap): largest
//! buffer first, each into the smallest gap left among the already placed buffers whose
//! lifetimes overlap its own, else on top of them. In-place partners are tried first.

use super::instance::Instance;

const UNPLACED: u64 = u64::MAX;

/// Offsets (units) by greedy by size with best fit.
pub(crate) fn greedy_by_size(inst: &Instance) -> Vec<u64> {
    let mut order: Vec<usize> = (0..inst.len()).collect();
    order.sort_unstable_by_key(|&i| {
        let len = inst.upper[i] - inst.lower[i];
        (std::cmp::Reverse(inst.w[i]), std::cmp::Reverse(len), i)
    });
    place_in_order(inst, &order)
}

/// The placed buffers sorted by offset, as parallel arrays: the scan for time-overlapping
/// buffers reads only the two lifetime arrays, which keeps it cache friendly.
#[derive(Default)]
struct Placed {
    lower: Vec<u64>,
    upper: Vec<u64>,
    off: Vec<u64>,
    end: Vec<u64>,
    id: Vec<u32>,
}

impl Placed {
    fn insert(&mut self, at: usize, lower: u64, upper: u64, off: u64, end: u64, id: u32) {
        self.lower.insert(at, lower);
        self.upper.insert(at, upper);
        self.off.insert(at, off);
        self.end.insert(at, end);
        self.id.insert(at, id);
    }

    /// Positions (in offset order) of the placed buffers alive during `[lower, upper)`.
    fn live(&self, lower: u64, upper: u64) -> impl Iterator<Item = usize> + '_ {
        self.lower
            .iter()
            .zip(&self.upper)
            .enumerate()
            .filter(move |(_, (&l, &u))| l < upper && lower < u)
            .map(|(k, _)| k)
    }
}

/// Places buffers in `order`, each at its in-place partner's offset when that is free,
/// else at the best-fitting gap. The placed buffers are kept sorted by offset, so one scan
/// finds the gaps without building overlap lists (O(n^2) time, O(n) memory).
pub(crate) fn place_in_order(inst: &Instance, order: &[usize]) -> Vec<u64> {
    let mut offsets = vec![UNPLACED; inst.len()];
    let mut placed = Placed::default();
    for &i in order {
        if inst.w[i] == 0 {
            offsets[i] = 0;
            continue;
        }
        let (lower, upper, w) = (inst.lower[i], inst.upper[i], inst.w[i]);
        let off = in_place_offset(inst, &offsets, &placed, i).unwrap_or_else(|| {
            best_fit(
                placed
                    .live(lower, upper)
                    .map(|k| (placed.off[k], placed.end[k])),
                w,
            )
        });
        offsets[i] = off;
        let at = placed.off.partition_point(|&o| o < off);
        placed.insert(at, lower, upper, off, off + w, i as u32);
    }
    offsets
}

/// The offset of a placed partner if `i` fits there without touching any other placed,
/// time-overlapping buffer.
fn in_place_offset(inst: &Instance, offsets: &[u64], placed: &Placed, i: usize) -> Option<u64> {
    let (lower, upper) = (inst.lower[i], inst.upper[i]);
    inst.partners[i].iter().find_map(|&p| {
        let at = offsets[p as usize];
        if at == UNPLACED {
            return None;
        }
        let end = at + inst.w[i];
        let clash = placed
            .live(lower, upper)
            .take_while(|&k| placed.off[k] < end)
            .any(|k| placed.id[k] != p && placed.end[k] > at);
        (!clash).then_some(at)
    })
}

/// The start of the smallest gap between the `busy` intervals (sorted by start) that holds `w`, else the
/// top of the highest interval. Ties go to the lowest gap.
fn best_fit(busy: impl Iterator<Item = (u64, u64)>, w: u64) -> u64 {
    let mut best: Option<(u64, u64)> = None; // (gap, offset)
    let mut cursor = 0u64;
    for (start, end) in busy {
        if start > cursor {
            let gap = start - cursor;
            if gap >= w && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, o)| o)
}

#[cfg(test)]
mod tests {
    use super::best_fit;

    #[test]
    fn best_fit_takes_the_smallest_gap_that_fits() {
        let busy = [(0, 4), (5, 8), (10, 20), (12, 14), (26, 30)];
        // Gaps: [4,5) len 1, [8,10) len 2, [20,26) len 6; top 30.
        assert_eq!(best_fit(busy.into_iter(), 2), 8);
        assert_eq!(best_fit(busy.into_iter(), 3), 20);
        assert_eq!(best_fit(busy.into_iter(), 7), 30);
        assert_eq!(best_fit(std::iter::empty(), 7), 0);
    }
}
