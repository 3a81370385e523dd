//! An independent checker of a [`Placement`]: it trusts none of the allocator's internals
//! and reports every violation, naming the buffers and the step concerned.
//!
//! # Method
//! A sweep over time: buffers start in order of their first step, and leave once their
//! last step is past. The live buffers sit in slots by offset (the distinct offsets of the
//! placement, sorted), under a max tree of their ends; a starting buffer `[o, e)` meets
//! every live buffer with an offset below `e` and an end above `o`, which a descent over
//! the slots below `e` that skips every subtree ending at or below `o` lists in
//! O((k + 1) log n). A valid placement meets nothing (or its in-place partner), so the
//! whole check is O(n log n) however many buffers are alive together.

use super::max_tree::MaxTree;
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
    out.extend(overlaps(buffers, offsets, &allowed));
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// Every pair of buffers live at the same step whose address ranges intersect, except the
/// `allowed` pairs at the same offset (see the module docs).
fn overlaps(
    buffers: &[Buffer],
    offsets: &[u64],
    allowed: &HashSet<(usize, usize)>,
) -> Vec<AllocViolation> {
    let end = |i: usize| offsets[i].saturating_add(buffers[i].size);
    let mut starts: Vec<usize> = (0..buffers.len())
        .filter(|&i| buffers[i].size > 0 && buffers[i].lower < buffers[i].upper)
        .collect();
    let mut ends = starts.clone();
    starts.sort_unstable_by_key(|&i| (buffers[i].lower, i));
    ends.sort_unstable_by_key(|&i| (buffers[i].upper, i));
    let mut live = Slots::new(starts.iter().map(|&i| offsets[i]).collect(), buffers.len());
    let (mut out, mut met) = (Vec::new(), Vec::new());
    let mut e = 0;
    for &i in &starts {
        let b = buffers[i];
        while e < ends.len() && buffers[ends[e]].upper <= b.lower {
            live.remove(ends[e], offsets[ends[e]]);
            e += 1;
        }
        met.clear();
        live.meeting(offsets[i], end(i), &mut met);
        for &j in &met {
            if !(offsets[i] == offsets[j] && allowed.contains(&(i, j))) {
                out.push(AllocViolation::Overlap {
                    a: j.min(i),
                    b: j.max(i),
                    step: b.lower,
                });
            }
        }
        live.insert(i, offsets[i], end(i));
    }
    out.sort_unstable_by_key(|v| match v {
        AllocViolation::Overlap { a, b, step } => (*step, *a, *b),
        _ => (0, 0, 0),
    });
    out
}

const NONE: usize = usize::MAX;

/// The live buffers by offset slot, under a max tree of their ends. A slot's buffers form
/// a linked list (more than one only where buffers share an offset: in-place pairs, or
/// violations).
struct Slots {
    /// The distinct offsets, sorted: slot `k` holds the live buffers at `offset[k]`.
    offset: Vec<u64>,
    /// First live buffer of each slot, and the next one of each buffer.
    head: Vec<usize>,
    next: Vec<usize>,
    /// End (offset plus size) of each buffer.
    end: Vec<u64>,
    /// The highest end in each slot (0 when empty).
    max_end: MaxTree,
}

impl Slots {
    fn new(mut offset: Vec<u64>, buffers: usize) -> Self {
        offset.sort_unstable();
        offset.dedup();
        Slots {
            head: vec![NONE; offset.len()],
            max_end: MaxTree::new(offset.len()),
            offset,
            next: vec![NONE; buffers],
            end: vec![0; buffers],
        }
    }

    fn slot(&self, offset: u64) -> usize {
        self.offset.partition_point(|&o| o < offset)
    }

    fn insert(&mut self, i: usize, offset: u64, end: u64) {
        let k = self.slot(offset);
        self.end[i] = end;
        self.next[i] = self.head[k];
        self.head[k] = i;
        self.refresh(k);
    }

    fn remove(&mut self, i: usize, offset: u64) {
        let k = self.slot(offset);
        if self.head[k] == i {
            self.head[k] = self.next[i];
        } else {
            let mut j = self.head[k];
            while self.next[j] != i {
                j = self.next[j];
            }
            self.next[j] = self.next[i];
        }
        self.refresh(k);
    }

    fn held(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        let some = |j: usize| (j != NONE).then_some(j);
        std::iter::successors(some(self.head[k]), move |&j| some(self.next[j]))
    }

    fn refresh(&mut self, k: usize) {
        let max = self.held(k).map(|j| self.end[j]).max().unwrap_or(0);
        self.max_end.set(k, max);
    }

    /// Pushes onto `out` the live buffers whose address range meets `[offset, end)`: an
    /// offset below `end` and an end above `offset`.
    fn meeting(&self, offset: u64, end: u64, out: &mut Vec<usize>) {
        self.max_end.above(self.slot(end), offset, &mut |k| {
            out.extend(self.held(k).filter(|&j| self.end[j] > offset));
        });
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
