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

use crate::genome::Genome;
use crate::search::{Evaluator, Member};

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
        let mut cands = neighbours(&best.genome, n);
        if cands.len() > ROUND_CANDIDATES {
            let stride = cands.len().div_ceil(ROUND_CANDIDATES);
            let offset = round % stride;
            cands = cands.into_iter().skip(offset).step_by(stride).collect();
        }
        proposed += cands.len();
        if round > 0 && proposed > MAX_CANDIDATES {
            break;
        }
        let improved = step(ev, &mut best, cands);
        ev.report("local refinement", round + 1, MAX_ROUNDS);
        if !improved {
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
        if !improved {
            break;
        }
    }
    best
}

/// The neighbours [`bottleneck`] tries, or `None` when the genome has no schedule.
fn bottleneck_neighbours(ctx: &crate::context::Context<'_>, g: &Genome) -> Option<Vec<Genome>> {
    let steps = crate::evaluate::schedule(ctx, g)?;
    let ops: Vec<sgc_ir::OpId> = steps.iter().map(|s| s.0).collect();
    let profile = sgc_ir::simulate(ctx.g, &ops).ok()?;
    let peak = profile.peak_step?;
    let blocks = crate::discard::Blocks::new(&g.splits, ctx.n);
    let mut weight: std::collections::BTreeMap<(u32, u32), u64> = Default::default();
    for i in profile
        .instances
        .iter()
        .filter(|i| i.start <= peak && peak <= i.end)
    {
        if let Some(p) = ctx.g.producer(i.root) {
            *weight.entry(blocks.of(p.index() as u32)).or_default() += i.bytes;
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
                let mut v = s.clone();
                v.push(p);
                out.push(g.with_splits(v));
            }
        }
        // The splits bounding the block: the one before it and the one closing it.
        let before = first.checked_sub(1).and_then(|b| s.binary_search(&b).ok());
        let closing = s.binary_search(&last).ok();
        for j in [closing, before].into_iter().flatten() {
            moves(g, j, n, &[1, 2, 4, 8, 16, 32], &mut out);
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

/// The neighbours of a genome (see the module doc), in a fixed order.
fn neighbours(g: &Genome, n: u32) -> Vec<Genome> {
    let s = &g.splits;
    let mut out = Vec::new();
    for j in 0..s.len() {
        moves(g, j, n, &[1, 4, 16, 64], &mut out);
    }
    let mut start = 0;
    for &end in s.iter().chain(std::iter::once(&n.saturating_sub(1))) {
        let mid = start + (end.saturating_sub(start)) / 2;
        if mid > start && mid < end {
            let mut v = s.clone();
            v.push(mid);
            out.push(g.with_splits(v));
        }
        start = end + 1;
    }
    for k in 0..3 {
        out.push(g.clone().with_rules(g.rules.flipped(k)));
    }
    out
}

/// Split `j` moved by each of `deltas` either way (staying strictly between its neighbours),
/// then removed.
fn moves(g: &Genome, j: usize, n: u32, deltas: &[u32], out: &mut Vec<Genome>) {
    let s = &g.splits;
    let lo = if j == 0 { 0 } else { s[j - 1] + 1 };
    let hi = s.get(j + 1).map_or(n, |&x| x); // exclusive
    for &d in deltas {
        for p in [s[j].checked_sub(d), s[j].checked_add(d)]
            .into_iter()
            .flatten()
        {
            if p >= lo && p < hi {
                let mut v = s.clone();
                v[j] = p;
                out.push(g.with_splits(v));
            }
        }
    }
    let mut v = s.clone();
    v.remove(j);
    out.push(g.with_splits(v));
}
