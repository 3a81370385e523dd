//! The live bytes of a step sequence under the IR's memory model, in one pass (tests only).
//!
//! `sgc_ir::simulate` is the model every tool shares (a storage lives from the step that
//! produces it to its last use; a new production starts a new instance), and it still
//! measures the chosen plan. The search counts live bytes inside its walk
//! ([`crate::recompute::Schedule::live`]); this is the same model computed from the steps
//! alone, without the walk's state, and `evaluate::tests` check all three agree.

use crate::context::{Context, Validity};
use sgc_ir::OpId;

const NONE: u32 = u32::MAX;

/// The live (non-persistent) bytes at every step of `steps`, or `None` where `simulate`
/// reports an error (a read of a tensor never produced, or of a stale view).
pub(crate) fn live_bytes(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> Option<Vec<u64>> {
    let g = ctx.g;
    let nt = g.num_tensors();
    // Per root: the open instance's (start, last use); per tensor: the step it was made.
    let mut open = vec![(NONE, NONE); nt];
    let mut produced = vec![NONE; nt];
    let mut delta = vec![0i128; steps.len() + 1];
    for &t in &ctx.input_roots {
        open[t.index()] = (0, 0);
    }
    let close = |delta: &mut [i128], r: usize, (start, last): (u32, u32)| {
        if last != NONE {
            delta[start as usize] += i128::from(ctx.bytes[r]);
            delta[last as usize + 1] -= i128::from(ctx.bytes[r]);
        }
    };
    for (s, &(op, _)) in steps.iter().enumerate() {
        let s = s as u32;
        let o = g.op(op);
        for &t in &o.inputs {
            let (ti, root) = (t.index(), g.storage_root(t).index());
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
        for &t in &o.outputs {
            let (ti, root) = (t.index(), g.storage_root(t).index());
            produced[ti] = s;
            if ctx.validity[ti] != Validity::Current {
                continue;
            }
            if root == ti {
                if open[root].0 != NONE {
                    close(&mut delta, root, open[root]);
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
                close(&mut delta, r, (start, last));
            }
        }
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

/// The peak (persistent bytes included) of `steps`, or `None` as for [`live_bytes`].
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
