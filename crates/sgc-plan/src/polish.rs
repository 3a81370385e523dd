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
//! [`MAX_ROUNDS`] rounds, or once a round would take it past [`MAX_CANDIDATES`].
//! Neighbours that change no discard are cached and cost nothing.

use crate::evaluate::Genome;
use crate::search::{Evaluator, Member};

/// The most rounds of the climb.
pub(crate) const MAX_ROUNDS: usize = 16;
/// The most candidates one climb proposes.
pub(crate) const MAX_CANDIDATES: usize = 3000;

/// Climbs from `start` and returns the best member found (`start` if none is better).
pub(crate) fn polish(ev: &mut Evaluator<'_>, start: &Member) -> Member {
    let n = ev.ctx.n as u32;
    let mut best = start.clone();
    let mut proposed = 0;
    for round in 0..MAX_ROUNDS {
        let cands = neighbours(&best.genome, n);
        proposed += cands.len();
        if round > 0 && proposed > MAX_CANDIDATES {
            break;
        }
        let fits = ev.eval_batch(&cands);
        let mut improved = false;
        for (genome, fitness) in cands.into_iter().zip(fits) {
            if fitness.cmp(&best.fitness, ev.objective).is_lt() {
                best = Member { genome, fitness };
                improved = true;
            }
        }
        ev.report("local refinement", round + 1, MAX_ROUNDS);
        if !improved {
            break;
        }
    }
    best
}

/// The neighbours of a genome (see the module doc), in a fixed order.
fn neighbours(g: &Genome, n: u32) -> Vec<Genome> {
    let s = &g.splits;
    let mut out = Vec::new();
    let with = |splits: Vec<u32>| {
        let mut c = Genome::from_splits(splits);
        c.keep = g.keep.clone();
        c.rules = g.rules;
        c
    };
    for j in 0..s.len() {
        let lo = if j == 0 { 0 } else { s[j - 1] + 1 };
        let hi = s.get(j + 1).map_or(n, |&x| x); // exclusive
        for d in [1, 4, 16, 64] {
            for p in [s[j].checked_sub(d), s[j].checked_add(d)]
                .into_iter()
                .flatten()
            {
                if p >= lo && p < hi {
                    let mut v = s.clone();
                    v[j] = p;
                    out.push(with(v));
                }
            }
        }
        let mut v = s.clone();
        v.remove(j);
        out.push(with(v));
    }
    let mut start = 0;
    for &end in s.iter().chain(std::iter::once(&n.saturating_sub(1))) {
        let mid = start + (end.saturating_sub(start)) / 2;
        if mid > start && mid < end {
            let mut v = s.clone();
            v.push(mid);
            out.push(with(v));
        }
        start = end + 1;
    }
    for k in 0..3 {
        out.push(g.clone().with_rules(g.rules.flipped(k)));
    }
    out
}
