//! The storage instances and live bytes of a step sequence under the IR's memory model, in
//! one pass over the context's flat tables.
//!
//! `sgc_ir::simulate` is the model every tool shares (a storage lives from the step that
//! produces it to its last use; a new production starts a new instance), and it still
//! measures the chosen plan. The search counts live bytes inside its walk
//! ([`super::recompute::Schedule::live`]); this is the same model computed from the steps
//! alone, without the walk's state, and `evaluate::tests` check all three agree. The
//! bottleneck climb ([`super::polish`]) reads the instances live at a plan's peak here
//! rather than from `simulate`, which builds a whole profile, once per climb round,
//! between parallel batches, where the workers wait for it.

use crate::context::{Context, Validity};
use sgc_ir::{OpId, TensorId};

const NONE: u32 = u32::MAX;

/// One storage instance: its root, first step and last use (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Instance {
    pub root: TensorId,
    pub start: u32,
    pub last: u32,
}

/// The live (non-persistent) bytes at every step of `steps`, or `None` where `simulate`
/// reports an error (a read of a tensor never produced, or of a stale view).
#[cfg(test)]
pub(crate) fn live_bytes(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> Option<Vec<u64>> {
    let mut delta = vec![0i128; steps.len() + 1];
    for i in instances(ctx, steps)? {
        let bytes = i128::from(ctx.bytes[i.root.index()]);
        delta[i.start as usize] += bytes;
        delta[i.last as usize + 1] -= bytes;
    }
    let mut acc = 0i128;
    Some(
        delta[..steps.len()]
            .iter()
            .map(|d| {
                acc += d;
                u64::try_from(acc).unwrap_or(u64::MAX)
            })
            .collect(),
    )
}

/// The instances live at the first step where `live` (the live bytes of every step of
/// `steps`, as [`live_bytes`] or the walk gives them) peaks: `simulate`'s `peak_step` and
/// the instances spanning it. `None` as for [`live_bytes`], or for no steps.
pub(crate) fn at_peak(
    ctx: &Context<'_>,
    steps: &[(OpId, bool)],
    live: &[u64],
) -> Option<Vec<Instance>> {
    let mut peak: Option<(usize, u64)> = None;
    for (s, &l) in live.iter().enumerate() {
        if peak.is_none_or(|(_, m)| l > m) {
            peak = Some((s, l));
        }
    }
    let p = peak?.0 as u32;
    let mut all = instances(ctx, steps)?;
    all.retain(|i| i.start <= p && p <= i.last);
    Some(all)
}

/// Every non-persistent storage instance of `steps` that is used, or `None` where
/// `simulate` reports an error.
fn instances(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> Option<Vec<Instance>> {
    let nt = ctx.g.num_tensors();
    // Per root: the open instance's (start, last use); per tensor: the step it was made.
    let mut open = vec![(NONE, NONE); nt];
    let mut produced = vec![NONE; nt];
    let mut out = Vec::with_capacity(steps.len());
    for &t in &ctx.input_roots {
        open[t.index()] = (0, 0);
    }
    let close = |out: &mut Vec<Instance>, r: usize, (start, last): (u32, u32)| {
        if last != NONE {
            out.push(Instance {
                root: TensorId(r as u32),
                start,
                last,
            });
        }
    };
    for (s, &(op, _)) in steps.iter().enumerate() {
        let s = s as u32;
        for &t in ctx.inputs(op.index()) {
            let (ti, root) = (t.index(), ctx.root[t.index()].index());
            if ctx.activation[ti] && produced[ti] == NONE {
                return None;
            }
            if ctx.validity[ti] != Validity::Current {
                continue;
            }
            if root != ti && ctx.activation[ti] && produced[ti] < open[root].0 {
                return None;
            }
            touch(&mut open[root], s)?;
        }
        for &t in ctx.outputs(op.index()) {
            let (ti, root) = (t.index(), ctx.root[t.index()].index());
            produced[ti] = s;
            if ctx.validity[ti] != Validity::Current {
                continue;
            }
            if root == ti {
                if open[root].0 != NONE {
                    close(&mut out, root, open[root]);
                }
                open[root] = (s, s);
            } else {
                touch(&mut open[root], s)?;
            }
        }
    }
    if let Some(end) = steps.len().checked_sub(1) {
        for (r, &(start, last)) in open.iter().enumerate() {
            if start != NONE {
                let last = if ctx.kept[r] { end as u32 } else { last };
                close(&mut out, r, (start, last));
            }
        }
    }
    Some(out)
}

/// The peak (persistent bytes included) of `steps`, or `None` as for [`live_bytes`].
#[cfg(test)]
pub(crate) fn peak(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> Option<u64> {
    let live = live_bytes(ctx, steps)?;
    Some(
        ctx.persistent_bytes
            .saturating_add(live.into_iter().max().unwrap_or(0)),
    )
}

/// Marks a use of an open instance at step `s` (`None`: the storage is not allocated).
fn touch(instance: &mut (u32, u32), s: u32) -> Option<()> {
    (instance.0 != NONE).then(|| instance.1 = s)
}
