//! Chen et al. (2016), "Training deep nets with sublinear memory cost": split the forward
//! ops into segments of about sqrt(n) ops and keep only each segment's last output; the
//! other activations that the backward pass reads are recomputed from the segment's
//! checkpoint. Here it is one fixed genome for the shared split-based evaluator: a split
//! after every k-th forward op (every op when the graph has no phases), k = ceil(sqrt(n)).

use crate::context::Context;
use crate::evaluate::Genome;

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
