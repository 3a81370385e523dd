//! Static DTR (MegEngine's DTR configuration for static graphs): one simulation pass over
//! the traced order, no search.
//!
//! Before each step (an original op or a recomputation), the step's inputs and the
//! tensors recomputed for the current op are pinned; while the resident bytes (persistent
//! included) plus the step's new outputs exceed `eviction_threshold`, the resident
//! candidate with the lowest score is evicted:
//!
//! ```text
//! score = recompute_cost(t) / (size(t) * steps_until_next_use(t))
//! ```
//!
//! where `recompute_cost` adds the cost of every evicted ancestor its recomputation would
//! rebuild first (up to 64 producers), as DTR's evicted neighbourhoods do; a one-level cost
//! made long chains thrash.
//! Candidates are freeable (recomputable, not graph outputs), unpinned, at least
//! `evictee_min_size` bytes, and recomputable safely at their next use. Because the pass
//! is static, the next use is known exactly (the dynamic runtime has to use staleness).
//! With `sqrt_sampling`, only about sqrt(N) of the N candidates, drawn from a seeded
//! stream, are scored. An evicted tensor is recomputed when it is next read, through the
//! same recursive recomputation as every other strategy ([`crate::schedule`]).

use crate::context::Context;
use crate::schedule::{Infeasible, Policy, State};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sgc_ir::{OpId, TensorId};

/// Parameters of one DTR pass.
pub(crate) struct DtrParams {
    pub threshold: u64,
    pub min_size: u64,
    pub sqrt_sampling: bool,
    pub seed: u64,
}

struct Dtr<'p> {
    params: &'p DtrParams,
    rng: ChaCha8Rng,
    pinned: Vec<bool>,
    /// Inputs of the original op being scheduled.
    current: Vec<TensorId>,
}

impl Policy for Dtr<'_> {
    fn before_step(&mut self, st: &mut State<'_>, op: OpId) {
        let ctx = st.ctx;
        let need: u64 = ctx.out_roots[op.index()]
            .iter()
            .filter(|&&r| !st.is_counted(r))
            .map(|&r| ctx.size(r))
            .sum();
        let pins: Vec<TensorId> = self
            .current
            .iter()
            .chain(&ctx.in_roots[op.index()])
            .chain(&st.round_made)
            .copied()
            .collect();
        for &r in &pins {
            self.pinned[r.index()] = true;
        }
        while ctx.persistent_bytes + st.bytes + need > self.params.threshold {
            match self.victim(st) {
                Some(r) => st.release(r),
                None => break,
            }
        }
        for &r in &pins {
            self.pinned[r.index()] = false;
        }
    }
}

impl Dtr<'_> {
    /// The candidate with the lowest score (ties: lowest id).
    fn victim(&mut self, st: &State<'_>) -> Option<TensorId> {
        let ctx = st.ctx;
        let cands: Vec<(TensorId, u32)> = ctx
            .freeable_roots
            .iter()
            .filter(|&&r| {
                st.resident[r.index()]
                    && st.is_counted(r)
                    && !self.pinned[r.index()]
                    && ctx.size(r) >= self.params.min_size
            })
            .filter_map(|&r| {
                let next = ctx.next_access(r, st.pos.saturating_sub(1))?;
                (next <= ctx.root_hazard(r)).then_some((r, next))
            })
            .collect();
        let pool: Vec<(TensorId, u32)> = if self.params.sqrt_sampling && cands.len() > 1 {
            let k = (cands.len() as f64).sqrt().ceil() as usize;
            (0..k)
                .map(|_| cands[self.rng.random_range(0..cands.len())])
                .collect()
        } else {
            cands
        };
        pool.into_iter()
            .map(|(r, next)| (score(st, r, next), r))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, r)| r)
    }
}

fn score(st: &State<'_>, r: TensorId, next: u32) -> f64 {
    let ctx = st.ctx;
    let cost = cascade_cost(st, r);
    let dist = (next as f64 - st.pos as f64).max(1.0);
    // A tiny epsilon keeps zero-cost tensors ordered by size and distance.
    (cost + 1e-9) / (ctx.size(r).max(1) as f64 * dist)
}

/// The most producers [`cascade_cost`] follows: enough to see a long run of evicted
/// tensors, bounded so a score stays cheap.
const CASCADE_LIMIT: usize = 64;

/// What recomputing `r` would cost now: its producer, and the producers of every evicted
/// ancestor its recomputation would have to rebuild first (DTR's evicted neighbourhood),
/// counted up to [`CASCADE_LIMIT`] producers. A one-level cost makes a long chain look
/// cheap link by link, and the pass then evicts whole runs of it and recomputes them over
/// and over.
fn cascade_cost(st: &State<'_>, r: TensorId) -> f64 {
    let ctx = st.ctx;
    let Some(p) = ctx.g.producer(r) else {
        return f64::INFINITY;
    };
    let mut cost = 0.0;
    let mut stack = vec![p];
    let mut seen = vec![p];
    while let Some(op) = stack.pop() {
        cost += ctx.cost[op.index()];
        for &u in &ctx.in_roots[op.index()] {
            if st.resident[u.index()] {
                continue;
            }
            let Some(q) = ctx.g.producer(u) else { continue };
            if seen.len() >= CASCADE_LIMIT {
                return cost + ctx.cost[q.index()];
            }
            if !seen.contains(&q) {
                seen.push(q);
                stack.push(q);
            }
        }
    }
    cost
}

/// The DTR schedule.
pub(crate) fn schedule(
    ctx: &Context<'_>,
    params: &DtrParams,
) -> Result<Vec<(OpId, bool)>, Infeasible> {
    let mut st = State::new(ctx);
    let mut policy = Dtr {
        params,
        rng: ChaCha8Rng::seed_from_u64(params.seed),
        pinned: vec![false; ctx.g.num_tensors()],
        current: Vec::new(),
    };
    for i in 0..ctx.n {
        let op = OpId::new(i);
        st.pos = i;
        st.round_made.clear();
        policy.current = ctx.in_roots[i].clone();
        st.ensure_inputs(op, &mut policy)?;
        st.emit(op, false, &mut policy)?;
        for r in st.take_touched() {
            let last = ctx.last_access(r).map_or(0, |l| l as usize);
            if last <= i {
                if ctx.freeable[r.index()] {
                    st.release(r);
                } else if !ctx.kept[r.index()] {
                    st.uncount(r);
                }
            }
        }
    }
    st.pos = ctx.n;
    policy.current.clear();
    st.ensure_outputs(&mut policy)?;
    Ok(st.steps)
}
