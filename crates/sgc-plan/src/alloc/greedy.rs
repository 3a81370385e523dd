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

/// A placed buffer: address range, then lifetime.
#[derive(Clone, Copy)]
struct Placed {
    off: u64,
    end: u64,
    lower: u64,
    upper: u64,
    id: u32,
}

/// Places buffers in `order`, each at its in-place partner's offset when that is free,
/// else at the best-fitting gap. The placed buffers are kept sorted by offset, so one scan
/// finds the gaps without building overlap lists (O(n^2) time, O(n) memory).
pub(crate) fn place_in_order(inst: &Instance, order: &[usize]) -> Vec<u64> {
    let mut offsets = vec![UNPLACED; inst.len()];
    let mut placed: Vec<Placed> = Vec::with_capacity(order.len());
    for &i in order {
        if inst.w[i] == 0 {
            offsets[i] = 0;
            continue;
        }
        let (lower, upper, w) = (inst.lower[i], inst.upper[i], inst.w[i]);
        let live = |p: &&Placed| p.lower < upper && lower < p.upper;
        let off = in_place_offset(inst, &offsets, &placed, i)
            .unwrap_or_else(|| best_fit(placed.iter().filter(live).map(|p| (p.off, p.end)), w));
        offsets[i] = off;
        let at = placed.partition_point(|p| p.off < off);
        let id = i as u32;
        let end = off + w;
        placed.insert(
            at,
            Placed {
                off,
                end,
                lower,
                upper,
                id,
            },
        );
    }
    offsets
}

/// The offset of a placed partner if `i` fits there without touching any other placed,
/// time-overlapping buffer.
fn in_place_offset(inst: &Instance, offsets: &[u64], placed: &[Placed], i: usize) -> Option<u64> {
    let (lower, upper) = (inst.lower[i], inst.upper[i]);
    inst.partners[i].iter().find_map(|&p| {
        let at = offsets[p as usize];
        if at == UNPLACED {
            return None;
        }
        let end = at + inst.w[i];
        let clash = placed
            .iter()
            .take_while(|q| q.off < end)
            .any(|q| q.id != p && q.end > at && q.lower < upper && lower < q.upper);
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
