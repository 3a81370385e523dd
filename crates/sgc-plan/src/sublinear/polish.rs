//! Local refinement of the best split set: a deterministic hill climb after the genetic
//! search.
//!
//! The genetic refinement samples the neighbourhood of its survivors at random; a plan it
//! ends with can often still be improved by moving one split point a little. Each round
//! evaluates every neighbour of the current best genome (in parallel, like any batch):
//! each split moved by ±1, 4, 16 or 64 positions (staying between its neighbours), each
//! split removed, a split added in the middle of each block, and each switch of the
//! discard rules flipped. The best neighbour under the search's objective replaces the
//! genome when it is strictly better; the climb stops when none is, after
//! [`MAX_ROUNDS`] rounds, or once a round would take it past [`MAX_CANDIDATES`]; a round
//! evaluates at most [`ROUND_CANDIDATES`] neighbours.
//! Neighbours that change no discard are cached and cost nothing.
//!
//! Two more climbs aim their moves: [`bottleneck`] at the blocks that hold the most bytes
//! at the peak, [`costly`] at the recomputed ops that cost most. A last one, [`relaxed`],
//! judges each move after the memory-for-speed step.

use crate::sublinear::evaluate::Fitness;
use crate::sublinear::genome::Genome;
use crate::sublinear::search::{Evaluator, Member};

/// The most rounds of the climb.
pub(crate) const MAX_ROUNDS: usize = 16;
/// The most candidates one climb proposes.
pub(crate) const MAX_CANDIDATES: usize = 500;
/// The most neighbours one round evaluates: a genome with more (hundreds of splits) has an
/// evenly spaced selection of them evaluated, a different one each round.
pub(crate) const ROUND_CANDIDATES: usize = 256;

/// Climbs from `start` and returns the best member found (`start` if none is better).
pub(crate) fn polish(ev: &mut Evaluator<'_>, start: &Member) -> Member {
    let n = ev.ctx.n as u32;
    let mut best = start.clone();
    let mut proposed = 0;
    for round in 0..MAX_ROUNDS {
        // Edits first, genomes for the chosen ones only: a genome with thousands of splits
        // has ten times as many neighbours, each a copy of its splits.
        let mut edits = neighbours(&best.genome, n);
        if edits.len() > ROUND_CANDIDATES {
            let stride = edits.len().div_ceil(ROUND_CANDIDATES);
            let offset = round % stride;
            edits = edits.into_iter().skip(offset).step_by(stride).collect();
        }
        let cands: Vec<Genome> = edits.iter().map(|e| e.apply(&best.genome)).collect();
        proposed += cands.len();
        if round > 0 && proposed > MAX_CANDIDATES {
            break;
        }
        let improved = step(ev, &mut best, cands);
        ev.report("local refinement", round + 1, MAX_ROUNDS);
        if !improved || ev.spent() {
            break;
        }
    }
    best
}

/// Evaluates `cands` and moves `best` to the best of them that beats it; whether one did.
fn step(ev: &mut Evaluator<'_>, best: &mut Member, cands: Vec<Genome>) -> bool {
    let fits = ev.eval_batch(&cands);
    let mut improved = false;
    for (genome, fitness) in cands.into_iter().zip(fits) {
        if fitness.cmp(&best.fitness, ev.objective).is_lt() {
            *best = Member { genome, fitness };
            improved = true;
        }
    }
    improved
}

/// Climbs from `start` by reshaping the blocks that hold the most bytes at the plan's peak:
/// each is split at seven evenly spaced positions, and the splits that bound it are moved
/// by 1 to 32 positions, removed, or shifted together by up to 4. Up to [`MAX_ROUNDS`] rounds while strictly better.
pub(crate) fn bottleneck(ev: &mut Evaluator<'_>, start: &Member) -> Member {
    let mut best = start.clone();
    for round in 0..2 * MAX_ROUNDS {
        let Some(cands) = bottleneck_neighbours(ev.ctx, &best.genome) else {
            break;
        };
        let improved = step(ev, &mut best, cands);
        ev.report("reshaping the peak's blocks", round + 1, 2 * MAX_ROUNDS);
        if !improved || ev.spent() {
            break;
        }
    }
    best
}

/// How many of the costliest recomputed ops [`costly`] targets per round.
const COSTLY_OPS: usize = 8;

/// Climbs from `start` by keeping what costs most to recompute: for each of the
/// [`COSTLY_OPS`] recomputed ops that cost most (in the genome's schedule), a split right
/// at it, so that its outputs close a block and are kept, either added or taking the place
/// of the split before or after it. Up to [`MAX_ROUNDS`] rounds while strictly better.
///
/// The other climbs move splits by fixed distances and never aim at an op, so they can
/// leave costly ops (convolutions) recomputed that a split right at them keeps at the same
/// peak.
pub(crate) fn costly(ev: &mut Evaluator<'_>, start: &Member) -> Member {
    let mut best = start.clone();
    for round in 0..MAX_ROUNDS {
        let Some(cands) = costly_neighbours(ev.ctx, &best.genome) else {
            break;
        };
        let improved = step(ev, &mut best, cands);
        ev.report(
            "keeping the costliest recomputations",
            round + 1,
            MAX_ROUNDS,
        );
        if !improved || ev.spent() {
            break;
        }
    }
    best
}

/// The neighbours [`costly`] tries, or `None` when the genome has no schedule.
fn costly_neighbours(ctx: &crate::context::Context<'_>, g: &Genome) -> Option<Vec<Genome>> {
    let steps = crate::sublinear::evaluate::schedule(ctx, g)?;
    let mut ops: Vec<u32> = steps
        .iter()
        .filter(|s| s.1)
        .map(|s| s.0.index() as u32)
        .collect();
    ops.sort_unstable_by(|&a, &b| {
        ctx.cost_units[b as usize]
            .cmp(&ctx.cost_units[a as usize])
            .then(a.cmp(&b))
    });
    ops.dedup();
    let s = &g.splits;
    let mut out = Vec::new();
    for &p in ops.iter().take(COSTLY_OPS) {
        let Err(k) = s.binary_search(&p) else {
            continue;
        };
        out.push(Edit::Insert(p).apply(g));
        // In place of the split before it (k - 1) or after it (k): still sorted.
        for j in [k.checked_sub(1), (k < s.len()).then_some(k)]
            .into_iter()
            .flatten()
        {
            out.push(Edit::Move(j, p).apply(g));
        }
    }
    Some(out)
}

/// The neighbours [`bottleneck`] tries, or `None` when the genome has no schedule.
fn bottleneck_neighbours(ctx: &crate::context::Context<'_>, g: &Genome) -> Option<Vec<Genome>> {
    let plan = crate::sublinear::discard::plan(ctx, g);
    let schedule = crate::sublinear::recompute::schedule(ctx, g, &plan).ok()?;
    let at_peak = crate::sublinear::profile::at_peak(ctx, &schedule.steps, &schedule.live)?;
    let blocks = crate::sublinear::discard::Blocks::new(&g.splits, ctx.n);
    let mut weight: std::collections::BTreeMap<(u32, u32), u64> = Default::default();
    for i in at_peak {
        if let Some(p) = ctx.g.producer(i.root) {
            *weight.entry(blocks.of(p.index() as u32)).or_default() += ctx.size(i.root);
        }
    }
    let mut heavy: Vec<((u32, u32), u64)> = weight.into_iter().collect();
    heavy.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let s = &g.splits;
    let n = ctx.n as u32;
    let mut out = Vec::new();
    for &((first, last), _) in heavy.iter().take(2) {
        for k in 1..8 {
            let p = first + (last - first) * k / 8;
            if p > first && p < last {
                out.push(Edit::Insert(p).apply(g));
            }
        }
        // The splits bounding the block: the one before it and the one closing it.
        let before = first.checked_sub(1).and_then(|b| s.binary_search(&b).ok());
        let closing = s.binary_search(&last).ok();
        for j in [closing, before].into_iter().flatten() {
            let mut edits = Vec::new();
            moves(g, j, n, &[1, 2, 4, 8, 16, 32], &mut edits);
            out.extend(edits.iter().map(|e| e.apply(g)));
        }
        // Both shifted together (the block slides).
        if let (Some(a), Some(b)) = (before, closing) {
            for d in [-4i64, -2, -1, 1, 2, 4] {
                let mut v = s.clone();
                v[a] = (i64::from(v[a]) + d).clamp(0, i64::from(n) - 1) as u32;
                v[b] = (i64::from(v[b]) + d).clamp(0, i64::from(n) - 1) as u32;
                out.push(g.with_splits(v));
            }
        }
    }
    Some(out)
}

/// Climbs from the search's pick `start` (peak at most `level`) judging moves after
/// memory for speed, ranked by what each storage saves ([`super::relax::by_savings`]). The
/// other climbs rank a move before that step, so they turn down a move that recomputes a
/// little more but lets costlier storages be kept (a split moved by a few ops on a
/// recurrent net, so that its cell states can be kept).
///
/// First the pick itself, its kept roots dropped, is relaxed again by savings. Then each
/// round takes the neighbour of the plan (as [`polish`] makes them, kept roots dropped)
/// that recomputes least at or under `level`, other than the plan itself (a neighbour with
/// the plan's peak and cost is taken for the plan), and relaxes it by savings; it replaces
/// the plan when it recomputes less. The climb stops when it does not, after
/// [`MAX_ROUNDS`] rounds, or when the evaluator's limit is spent. The plan returned peaks at
/// most `level` and recomputes at most what `start` does.
pub(crate) fn relaxed(ev: &mut Evaluator<'_>, start: Member, level: u64) -> Member {
    let n = ev.ctx.n as u32;
    let by_savings = |ev: &mut Evaluator<'_>, g: Genome, f: Fitness| {
        let (genome, fitness) = crate::sublinear::relax::by_savings(ev, g, f, level);
        Member { genome, fitness }
    };
    let better = |m: &Member, best: &Member| {
        m.fitness.feasible && m.fitness.peak <= level && m.fitness.cost < best.fitness.cost
    };
    let mut best = start;
    let own = unkept(&best.genome);
    let own_fit = ev.eval(&own);
    if own_fit.feasible && own_fit.peak <= level {
        let m = by_savings(ev, own, own_fit);
        if better(&m, &best) {
            best = m;
        }
    }
    for round in 0..MAX_ROUNDS {
        if ev.spent() {
            break;
        }
        let base = unkept(&best.genome);
        let base_fit = ev.eval(&base);
        let mut edits = neighbours(&base, n);
        if edits.len() > ROUND_CANDIDATES {
            let stride = edits.len().div_ceil(ROUND_CANDIDATES);
            edits = edits
                .into_iter()
                .skip(round % stride)
                .step_by(stride)
                .collect();
        }
        let cands: Vec<Genome> = edits.iter().map(|e| e.apply(&base)).collect();
        let fits = ev.eval_batch(&cands);
        let Some((genome, fitness)) = cands
            .into_iter()
            .zip(fits)
            .filter(|(_, f)| f.feasible && f.peak <= level && *f != base_fit)
            .min_by_key(|(_, f)| f.cost)
        else {
            break;
        };
        let m = by_savings(ev, genome, fitness);
        if !better(&m, &best) {
            break;
        }
        best = m;
    }
    best
}

/// `g` without kept roots.
fn unkept(g: &Genome) -> Genome {
    Genome {
        keep: Vec::new(),
        ..g.clone()
    }
}

/// One neighbour of a genome, as an edit of it: made into a genome only when chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edit {
    /// Split `j` moved to position `p` (strictly between its neighbours).
    Move(usize, u32),
    /// Split `j` removed.
    Remove(usize),
    /// A split added at position `p` (not already a split).
    Insert(u32),
    /// Switch `k` of the rules flipped ([`super::genome::Rules::flipped`]).
    Flip(u8),
}

impl Edit {
    /// The genome `g` with this edit made (its splits stay sorted and distinct).
    fn apply(self, g: &Genome) -> Genome {
        let mut out = g.clone();
        match self {
            Edit::Move(j, p) => out.splits[j] = p,
            Edit::Remove(j) => {
                out.splits.remove(j);
            }
            Edit::Insert(p) => {
                if let Err(k) = out.splits.binary_search(&p) {
                    out.splits.insert(k, p);
                }
            }
            Edit::Flip(k) => out.rules = g.rules.flipped(k),
        }
        out
    }
}

/// The neighbours of a genome (see the module doc), in a fixed order.
fn neighbours(g: &Genome, n: u32) -> Vec<Edit> {
    let s = &g.splits;
    let mut out = Vec::new();
    for j in 0..s.len() {
        moves(g, j, n, &[1, 4, 16, 64], &mut out);
    }
    let mut start = 0;
    for &end in s.iter().chain(std::iter::once(&n.saturating_sub(1))) {
        let mid = start + (end.saturating_sub(start)) / 2;
        if mid > start && mid < end {
            out.push(Edit::Insert(mid));
        }
        start = end + 1;
    }
    for k in 0..3 {
        out.push(Edit::Flip(k));
    }
    out
}

/// Split `j` moved by each of `deltas` either way (staying strictly between its neighbours),
/// then removed.
fn moves(g: &Genome, j: usize, n: u32, deltas: &[u32], out: &mut Vec<Edit>) {
    let s = &g.splits;
    let lo = if j == 0 { 0 } else { s[j - 1] + 1 };
    let hi = s.get(j + 1).map_or(n, |&x| x); // exclusive
    for &d in deltas {
        for p in [s[j].checked_sub(d), s[j].checked_add(d)]
            .into_iter()
            .flatten()
        {
            if p >= lo && p < hi {
                out.push(Edit::Move(j, p));
            }
        }
    }
    out.push(Edit::Remove(j));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::sublinear::genome::Rules;
    use crate::sublinear::search::pool;
    use sgc_ir::testgen::{random_graph, GenConfig, SplitMix64};

    /// A genome of 1 to 6 random splits over the `n` ops.
    fn random_splits(rng: &mut SplitMix64, n: usize) -> Genome {
        let k = 1 + rng.index(6);
        Genome::from_splits((0..k).map(|_| rng.index(n.max(1)) as u32).collect())
    }

    /// Calls `each` on 40 small random graphs with the seed, the graph's context, a
    /// generator of that seed and a genome of random splits it drew.
    fn on_random_genomes(mut each: impl FnMut(u64, &Context<'_>, &mut SplitMix64, Genome)) {
        for seed in 0..40 {
            let g = random_graph(seed, &GenConfig::small());
            let ctx = Context::new(&g);
            let mut rng = SplitMix64::new(seed);
            let genome = random_splits(&mut rng, ctx.n);
            each(seed, &ctx, &mut rng, genome);
        }
    }

    /// Each neighbour of the costly climb is the genome with one split put right at one of
    /// the costliest recomputed ops of its schedule (added, or moved there from the split
    /// before or after it), its splits sorted and distinct, its kept roots and rules
    /// unchanged; and the climb never ends worse than it started.
    #[test]
    fn costly_neighbours_split_at_the_costliest_recomputations() {
        let pool = pool();
        let mut tried = 0;
        on_random_genomes(|_, ctx, rng, mut genome| {
            genome.rules = Rules::all()[rng.index(8)];
            let Some(steps) = crate::sublinear::evaluate::schedule(ctx, &genome) else {
                return;
            };
            let mut costs: Vec<(u64, u32)> = steps
                .iter()
                .filter(|s| s.1)
                .map(|s| (ctx.cost_units[s.0.index()], s.0.index() as u32))
                .collect();
            costs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            costs.dedup();
            let top: Vec<u32> = costs.iter().take(COSTLY_OPS).map(|c| c.1).collect();
            let cands = costly_neighbours(ctx, &genome).expect("a schedule");
            for c in &cands {
                tried += 1;
                assert!(c.splits.windows(2).all(|w| w[0] < w[1]), "{c:?}");
                assert_eq!((&c.keep, c.rules), (&genome.keep, genome.rules));
                let added: Vec<u32> = c
                    .splits
                    .iter()
                    .copied()
                    .filter(|p| !genome.splits.contains(p))
                    .collect();
                assert_eq!(added.len(), 1, "{c:?} from {genome:?}");
                assert!(top.contains(&added[0]), "{added:?} not among {top:?}");
                let removed = genome.splits.iter().filter(|p| !c.splits.contains(p));
                assert!(removed.count() <= 1, "{c:?} from {genome:?}");
            }
            let mut ev = crate::sublinear::search::Evaluator::new(ctx, &pool, None);
            let start = Member {
                fitness: ev.eval(&genome),
                genome,
            };
            let end = costly(&mut ev, &start);
            assert!(!start.fitness.cmp(&end.fitness, ev.objective).is_lt());
        });
        assert!(tried > 0, "no graph had a recomputation to aim at");
    }

    /// The climb judged after memory for speed never ends above its level or recomputing
    /// more than its start, and its result is its genome's fitness; on the real LSTM
    /// language model it takes the pick split at ops 116 and 1110 below the recompute of
    /// MegEngine's plan, at a lower peak than that plan's.
    #[test]
    fn the_relaxed_climb_never_ends_worse() {
        let pool = pool();
        let mut moved = 0;
        on_random_genomes(|seed, ctx, _, genome| {
            let mut ev = crate::sublinear::search::Evaluator::new(ctx, &pool, None);
            let start = Member {
                fitness: ev.eval(&genome),
                genome,
            };
            if !start.fitness.feasible {
                return;
            }
            let level = start.fitness.peak;
            let end = relaxed(&mut ev, start.clone(), level);
            assert!(end.fitness.feasible && end.fitness.peak <= level, "{seed}");
            assert!(end.fitness.cost <= start.fitness.cost, "{seed}");
            assert_eq!(ev.eval(&end.genome), end.fitness, "{seed}");
            moved += usize::from(end.fitness.cost < start.fitness.cost);
        });
        assert!(moved > 0, "the climb never moved");

        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../graphs/real/lstm_lm.json.gz");
        let g = sgc_ir::load_any(&path).expect("the LSTM graph loads");
        let ctx = Context::new(&g);
        let mut ev = crate::sublinear::search::Evaluator::new(&ctx, &pool, None);
        let genome = Genome::from_splits(vec![116, 1110]);
        let start = Member {
            fitness: ev.eval(&genome),
            genome,
        };
        let end = relaxed(&mut ev, start.clone(), start.fitness.peak);
        let share = |f: &Fitness| f.cost as f64 / ctx.step_units as f64;
        assert!(end.fitness.peak <= start.fitness.peak);
        // MegEngine's search ends at 5.5589% on this graph, 120000 B above this peak.
        assert!(
            share(&start.fitness) > 0.055589 && share(&end.fitness) < 0.055589,
            "{:.6} to {:.6}, {:?}",
            share(&start.fitness),
            share(&end.fitness),
            end.genome.splits
        );
    }

    /// Every neighbour, built from its edit, is the genome the edit describes, with its
    /// splits sorted and distinct (as `Genome::with_splits` makes them).
    #[test]
    fn edits_make_the_neighbours_they_describe() {
        let n = 200;
        let mut seed = 7u64;
        for _ in 0..200 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (seed >> 33) as usize % 12;
            let splits: Vec<u32> = (0..k)
                .map(|i| ((seed >> (i * 5)) % u64::from(n)) as u32)
                .collect();
            let mut g = Genome::from_splits(splits);
            g.keep = vec![3, 9];
            g.rules = Rules::all()[(seed >> 60) as usize % 8];
            let mut edits = neighbours(&g, n);
            let mut v = Vec::new();
            for j in 0..g.splits.len() {
                moves(&g, j, n, &[1, 2, 4, 8, 16, 32], &mut v);
            }
            edits.extend(v);
            edits.push(Edit::Insert(n / 3));
            for e in edits {
                let s = &g.splits;
                let want = match e {
                    Edit::Move(j, p) => {
                        let mut v = s.clone();
                        v[j] = p;
                        assert!(v.windows(2).all(|w| w[0] < w[1]), "{e:?} of {s:?}");
                        g.with_splits(v)
                    }
                    Edit::Remove(j) => {
                        let mut v = s.clone();
                        v.remove(j);
                        g.with_splits(v)
                    }
                    Edit::Insert(p) => {
                        let mut v = s.clone();
                        v.push(p);
                        g.with_splits(v)
                    }
                    Edit::Flip(k) => g.clone().with_rules(g.rules.flipped(k)),
                };
                assert_eq!(e.apply(&g), want, "{e:?} of {g:?}");
            }
        }
    }
}
