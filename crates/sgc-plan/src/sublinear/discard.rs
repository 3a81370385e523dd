//! The discard plan of a split-based candidate: which storages are freed early, after
//! which access, and recomputed before which read (MegEngine's `make_discard_plan`).
//!
//! Split points cut the traced order into *blocks*; the outputs of a block's last op are
//! its checkpoints and are never discarded. For every other freeable storage made in a
//! block and read after the block's end, the plan looks at the gaps between its
//! consecutive accesses from its last access inside the block on, and discards it over
//! the largest one: freed after the access that opens the gap, recomputed right before
//! the read that closes it ([`super::recompute`] does the recomputation, bounded to the
//! block). A gap is only worth it when it is longer than the number of activations the
//! closing reader takes (a short gap frees memory for a moment and pays a recomputation
//! for it), and a storage is never discarded right after it is made unless its producer
//! has other outputs that are read (recomputing it there would gain nothing). Discards
//! whose gap closes in the very next block are cancelled: that block is where the storage
//! is read next anyway. Storages kept on purpose (the memory-for-speed genes) are never
//! discarded, and neither is a storage whose recomputation would come after an in-place
//! write to persistent state that it reads ([`crate::context`]'s hazard). The genome's
//! [`Rules`] may lift the next-block and the right-after-creation rules.
//!
//! The schedule depends on a genome only through this plan, so the plan's fingerprint
//! ([`key`]) caches evaluations: many genomes differ only in split points that change no
//! discard.

use crate::context::Context;
use crate::sublinear::fingerprint::{Fingerprint, Fingerprinter};
use crate::sublinear::genome::{Genome, Rules};
use sgc_ir::TensorId;

/// One discarded storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Discard {
    pub root: TensorId,
    /// Traced position of the access after which the original is freed.
    pub open: u32,
    /// Traced position of the read before which it is recomputed (the next access).
    pub close: u32,
    /// First position of the block it was made in (0 when recomputation is unbounded):
    /// its recomputation recomputes missing inputs made at or after it and reads older
    /// ones as they are.
    pub block_begin: u32,
}

/// The blocks of a split set: block `k` ends at `splits[k]`; the last block ends at `n - 1`.
pub(crate) struct Blocks<'a> {
    splits: &'a [u32],
    n: u32,
}

impl<'a> Blocks<'a> {
    pub fn new(splits: &'a [u32], n: usize) -> Self {
        Blocks {
            splits,
            n: n as u32,
        }
    }

    /// `(first, last)` position of the block holding `pos`.
    pub fn of(&self, pos: u32) -> (u32, u32) {
        let k = self.splits.partition_point(|&s| s < pos);
        let first = if k == 0 { 0 } else { self.splits[k - 1] + 1 };
        let last = self
            .splits
            .get(k)
            .copied()
            .unwrap_or(self.n.saturating_sub(1));
        (first, last)
    }
}

/// The discard plan of `genome`, ordered by root.
pub(crate) fn plan(ctx: &Context<'_>, genome: &Genome) -> Vec<Discard> {
    let kept = kept(ctx, genome);
    let s = &genome.splits;
    let last_pos = (ctx.n as u32).saturating_sub(1);
    let block_last = |k: usize| s.get(k).copied().unwrap_or(last_pos);
    let mut out = Vec::with_capacity(ctx.discardable.len());
    // The block of the current storage: it ends at block_last(k).
    let mut k = 0;
    // Only storages with a gap worth discarding over: the others never are.
    for &j in &ctx.discardable {
        let j = j as usize;
        let (made, last, r) = ctx.freeable_by_made[j];
        while made > block_last(k) {
            k += 1;
        }
        // Read only inside its block: kept.
        if last <= block_last(k) {
            continue;
        }
        // A checkpoint: an output of the op closing the block it was made in (the last
        // block closes at no split). Or kept on purpose.
        let checkpoint = s
            .get(k)
            .is_some_and(|&split| ctx.out_roots[split as usize].contains(&r));
        if checkpoint || kept.as_ref().is_some_and(|b| b.contains(r)) {
            continue;
        }
        if genome.rules.forward_only && !ctx.forward[made as usize] {
            continue;
        }
        let block = Block {
            first: if k == 0 { 0 } else { s[k - 1] + 1 },
            last: block_last(k),
            next_last: block_last(k + 1),
        };
        if let Some(mut d) = discard_of(ctx, &block, genome.rules, j) {
            if genome.rules.unbounded {
                d.block_begin = 0;
            }
            out.push(d);
        }
    }
    out.sort_unstable_by_key(|d| d.root);
    out
}

/// The block of a storage's producer: its first and last positions, and the last position
/// of the block after it.
struct Block {
    first: u32,
    last: u32,
    next_last: u32,
}

/// The genome's kept roots (`None`: none).
fn kept(ctx: &Context<'_>, genome: &Genome) -> Option<Bits> {
    if genome.keep.is_empty() {
        return None;
    }
    let mut p = Bits::new(ctx.g.num_tensors());
    for &k in &genome.keep {
        if (k as usize) < ctx.g.num_tensors() {
            p.insert(TensorId(k));
        }
    }
    Some(p)
}

/// A set of tensors, one bit each.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn insert(&mut self, t: TensorId) {
        self.0[t.index() / 64] |= 1 << (t.index() % 64);
    }

    fn contains(&self, t: TensorId) -> bool {
        self.0[t.index() / 64] & (1 << (t.index() % 64)) != 0
    }
}

/// The discard of freeable root `j` (its index in [`Context::freeable_by_made`]), if the
/// rules of the module doc give one.
fn discard_of(ctx: &Context<'_>, block: &Block, rules: Rules, j: usize) -> Option<Discard> {
    let r = ctx.freeable_by_made[j].2;
    let (a, b) = (ctx.gap_at[j] as usize, ctx.gap_at[j + 1] as usize);
    let acc = &ctx.gap_acc[a..b];
    let gaps = &ctx.gap_best[a..b];
    let made = *acc.first()?;
    let (first, last) = (block.first, block.last);
    if *acc.last()? <= last {
        return None;
    }
    // The last access inside the block opens the first gap a discard may take; the gap
    // right after the storage is made only when its producer's other outputs are read.
    let mut i0 = acc.partition_point(|&x| x <= last) - 1;
    if i0 == 0 && ctx.single_output[made as usize] && !rules.at_creation {
        i0 = 1;
    }
    let i = *gaps.get(i0)?;
    if i == crate::context::NO_GAP {
        return None;
    }
    let (open, close) = (acc[i as usize], acc[i as usize + 1]);
    let in_next_block = close > last && close <= block.next_last && last + 1 < ctx.n as u32;
    if (in_next_block && !rules.next_block) || close > ctx.root_hazard(r) {
        return None;
    }
    Some(Discard {
        root: r,
        open,
        close,
        block_begin: first,
    })
}

/// The fingerprint of what a schedule depends on ([`super::fingerprint`]): `(root, open,
/// block_begin)` of every discard, and whether recomputation is limited to forward ops.
pub(crate) fn key(genome: &Genome, plan: &[Discard]) -> Fingerprint {
    let mut f = Fingerprinter::default();
    for d in plan {
        f.words(&[d.root.0, d.open, d.block_begin]);
    }
    f.word(u32::from(genome.rules.forward_only));
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};

    /// A freeable storage left out of [`Context::discardable`] gets no discard whatever
    /// block it is made in and whatever the rules, so the plan may skip it.
    #[test]
    fn storages_left_out_are_never_discarded() {
        let mut skipped = 0;
        for seed in 0..40 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let n = ctx.n as u32;
            for (j, &(made, _, _)) in ctx.freeable_by_made.iter().enumerate() {
                if ctx.discardable.contains(&(j as u32)) {
                    continue;
                }
                skipped += 1;
                for _ in 0..20 {
                    let first = rng.index(made as usize + 1) as u32;
                    let last = made + rng.index((n - made) as usize) as u32;
                    let next_last = last + rng.index((n - last) as usize) as u32;
                    let block = Block {
                        first,
                        last,
                        next_last,
                    };
                    for rules in Rules::all() {
                        assert_eq!(discard_of(&ctx, &block, rules, j), None, "seed {seed}");
                    }
                }
            }
        }
        assert!(skipped > 100, "storages left out: {skipped}");
    }
}
