//! An independent checker of a [`Placement`]: it trusts none of the allocator's internals
//! and reports every violation, naming the buffers and the step concerned.

use super::{round_up, Buffer, InPlace, Placement};
use std::collections::HashSet;
use std::fmt;

/// One way a placement is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocViolation {
    /// The placement has a different number of offsets than there are buffers.
    Count { offsets: usize, buffers: usize },
    /// Buffers `a` and `b` are both live at `step` and their address ranges intersect.
    Overlap { a: usize, b: usize, step: u64 },
    /// `offset` of `buffer` is not a multiple of the alignment.
    Misaligned {
        buffer: usize,
        offset: u64,
        align: u64,
    },
    /// `buffer` ends (padded) at `end`, past the arena.
    OutsideArena { buffer: usize, end: u64, arena: u64 },
}

impl fmt::Display for AllocViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocViolation::Count { offsets, buffers } => {
                write!(f, "{offsets} offsets for {buffers} buffers")
            }
            AllocViolation::Overlap { a, b, step } => write!(
                f,
                "buffers {a} and {b} are both live at step {step} and overlap in address"
            ),
            AllocViolation::Misaligned {
                buffer,
                offset,
                align,
            } => write!(
                f,
                "buffer {buffer}: offset {offset} is not a multiple of {align}"
            ),
            AllocViolation::OutsideArena { buffer, end, arena } => {
                write!(
                    f,
                    "buffer {buffer} ends at {end}, past the arena of {arena}"
                )
            }
        }
    }
}

/// Checks `placement` without in-place pairs: see [`validate_in_place`].
pub fn validate(
    buffers: &[Buffer],
    placement: &Placement,
    align: u64,
) -> Result<(), Vec<AllocViolation>> {
    validate_in_place(buffers, placement, align, &[])
}

/// Checks that offsets are aligned, every buffer (padded) fits in the arena, and no two
/// buffers live at the same step overlap in address, except an in-place pair given in
/// `pairs` whose input's last step is the output's first step and which share exactly
/// the same offset. Returns every violation found.
pub fn validate_in_place(
    buffers: &[Buffer],
    placement: &Placement,
    align: u64,
    pairs: &[InPlace],
) -> Result<(), Vec<AllocViolation>> {
    let offsets = &placement.offsets;
    if offsets.len() != buffers.len() {
        return Err(vec![AllocViolation::Count {
            offsets: offsets.len(),
            buffers: buffers.len(),
        }]);
    }
    let align = align.max(1);
    let mut out = bounds_violations(buffers, placement, align);
    let allowed: HashSet<(usize, usize)> = pairs
        .iter()
        .filter(|p| eligible(buffers, p))
        .flat_map(|p| [(p.output, p.input), (p.input, p.output)])
        .collect();
    let mut order: Vec<usize> = (0..buffers.len())
        .filter(|&i| buffers[i].size > 0 && buffers[i].lower < buffers[i].upper)
        .collect();
    order.sort_unstable_by_key(|&i| (buffers[i].lower, i));
    let mut active: Vec<usize> = Vec::new();
    for &i in &order {
        let b = buffers[i];
        active.retain(|&j| buffers[j].upper > b.lower);
        for &j in &active {
            let (oi, oj) = (offsets[i], offsets[j]);
            let apart = oi.saturating_add(b.size) <= oj || oj.saturating_add(buffers[j].size) <= oi;
            let shared = oi == oj && allowed.contains(&(i, j));
            if !apart && !shared {
                out.push(AllocViolation::Overlap {
                    a: j.min(i),
                    b: j.max(i),
                    step: b.lower,
                });
            }
        }
        active.push(i);
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

fn eligible(buffers: &[Buffer], p: &InPlace) -> bool {
    match (buffers.get(p.output), buffers.get(p.input)) {
        (Some(o), Some(i)) => p.output != p.input && i.upper == o.lower.wrapping_add(1),
        _ => false,
    }
}

fn bounds_violations(buffers: &[Buffer], placement: &Placement, align: u64) -> Vec<AllocViolation> {
    let mut out = Vec::new();
    for (i, (b, &offset)) in buffers.iter().zip(&placement.offsets).enumerate() {
        if offset % align != 0 {
            out.push(AllocViolation::Misaligned {
                buffer: i,
                offset,
                align,
            });
        }
        let end = round_up(b.size, align)
            .and_then(|w| offset.checked_add(w))
            .unwrap_or(u64::MAX);
        if b.size > 0 && end > placement.arena {
            out.push(AllocViolation::OutsideArena {
                buffer: i,
                end,
                arena: placement.arena,
            });
        }
    }
    out
}
