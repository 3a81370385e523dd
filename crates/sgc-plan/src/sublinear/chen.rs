//! Chen et al. (2016), "Training deep nets with sublinear memory cost": split the forward
//! ops into segments of about sqrt(n) ops and keep only each segment's last output; the
//! other activations that the backward pass reads are recomputed from the segment's
//! checkpoint. Here it is one fixed split set for the shared split-based evaluator: a split
//! after every k-th forward op (every op when the graph has no phases), k = ceil(sqrt(n)),
//! under the variant of the discard rules that peaks lowest. Only forward
//! storages are discarded and every op runs at most twice, so it recomputes at most one
//! forward pass.

use crate::context::Context;
use crate::sublinear::evaluate::{fitness_with, outcome, Objective};
use crate::sublinear::genome::Genome;

/// The split points of Chen's sqrt(n) rule.
pub(crate) fn genome(ctx: &Context<'_>) -> Genome {
    scaled(ctx, 1.0)
}

/// Chen's rule with segments of `scale * sqrt(n)` forward ops (seeds for the search).
pub(crate) fn scaled(ctx: &Context<'_>, scale: f64) -> Genome {
    let fwd = ctx.forward_ops();
    let k = (scale * (fwd.len() as f64).sqrt()).ceil().max(1.0) as usize;
    Genome::from_splits(fwd.iter().skip(k - 1).step_by(k).copied().collect())
}

/// Chen's plan: its split set under the variant of the rules ([`super::evaluate::Rules`])
/// that peaks lowest (then recomputes least; ties: the first variant).
pub(crate) fn best(ctx: &Context<'_>) -> Genome {
    let mut best: Option<(Genome, crate::sublinear::evaluate::Fitness)> = None;
    let mut chen = genome(ctx);
    chen.rules.forward_only = true;
    for g in chen.variants() {
        let plan = crate::sublinear::discard::plan(ctx, &g);
        let f = fitness_with(outcome(ctx, &g, &plan), &g);
        if best
            .as_ref()
            .is_none_or(|b| f.cmp(&b.1, Objective::default()).is_lt())
        {
            best = Some((g, f));
        }
    }
    best.map_or(chen, |b| b.0)
}
