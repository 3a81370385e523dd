//! The static view of an instance the search works on: sections, each buffer's section
//! range, time overlaps, section members, partitions and preorder features. Built once per
//! instance and shared by every attempt.

use crate::alloc::instance::Instance;

/// A buffer, by index into the instance.
pub(super) type Id = u32;

/// A connected group of buffers over the section range `[lo, hi)`: no buffer outside the
/// group lives in those sections.
#[derive(Clone, Debug)]
pub(super) struct Group {
    pub buffers: Vec<Id>,
    pub lo: u32,
    pub hi: u32,
}

/// Compressed row storage: the items of row `r` are `items[start[r]..start[r + 1]]`.
pub(super) struct Rows {
    start: Vec<u32>,
    items: Vec<Id>,
}

impl Rows {
    pub fn row(&self, r: usize) -> &[Id] {
        &self.items[self.start[r] as usize..self.start[r + 1] as usize]
    }

    /// Rows filled by `each(emit)`, which must call `emit(row, item)` for every item, the
    /// same way both times it is called (once to count, once to fill).
    fn build(rows: usize, each: impl Fn(&mut dyn FnMut(usize, Id))) -> Self {
        let mut start = vec![0u32; rows + 1];
        each(&mut |r, _| start[r + 1] += 1);
        for r in 0..rows {
            start[r + 1] += start[r];
        }
        let mut fill = start.clone();
        let mut items = vec![0; start[rows] as usize];
        each(&mut |r, item| {
            items[fill[r] as usize] = item;
            fill[r] += 1;
        });
        Rows { start, items }
    }
}

pub(super) struct Model {
    /// Padded size (units) of each buffer; 0 for an empty one.
    pub w: Vec<u64>,
    /// Section range `[a, b)` of each buffer (`(0, 0)` when empty).
    pub span: Vec<(u32, u32)>,
    /// The non-empty buffers whose lifetimes overlap each buffer's.
    pub overlaps: Rows,
    /// The buffers living in each section.
    pub members: Rows,
    pub sections: usize,
    /// The independent groups of the whole instance.
    pub partitions: Vec<Group>,
    /// Lifetime length and area (length times size) of each buffer, for the preorders.
    pub width: Vec<u64>,
    pub area: Vec<u128>,
    /// The previous buffer (by index) with the same lifetime and size, or [`NO_TWIN`].
    pub twin: Vec<Id>,
}

pub(super) const NO_TWIN: Id = Id::MAX;

impl Model {
    /// Sections are the distinct end times: section `k` is the moment just before the
    /// `k`-th end, when the most buffers are alive (any other moment's live set is a subset
    /// of one of these), so the section bound loses nothing by skipping the others.
    pub fn new(inst: &Instance) -> Self {
        let n = inst.len();
        let active = |i: usize| inst.w[i] > 0;
        let mut ends: Vec<u64> = (0..n)
            .filter(|&i| active(i))
            .map(|i| inst.upper[i])
            .collect();
        ends.sort_unstable();
        ends.dedup();
        let section_of = |t: u64| ends.partition_point(|&e| e <= t) as u32;
        let span: Vec<(u32, u32)> = (0..n)
            .map(|i| match active(i) {
                true => (section_of(inst.lower[i]), section_of(inst.upper[i])),
                false => (0, 0),
            })
            .collect();
        let members = Rows::build(ends.len(), |emit| {
            for (i, &(a, b)) in span.iter().enumerate() {
                for s in a..b {
                    emit(s as usize, i as Id);
                }
            }
        });
        let width: Vec<u64> = (0..n).map(|i| inst.upper[i] - inst.lower[i]).collect();
        Model {
            w: inst.w.clone(),
            overlaps: overlaps(inst),
            members,
            sections: ends.len(),
            partitions: partitions(&span),
            area: (0..n)
                .map(|i| inst.w[i] as u128 * width[i] as u128)
                .collect(),
            width,
            twin: twins(inst),
            span,
        }
    }

    pub fn len(&self) -> usize {
        self.w.len()
    }

    /// The work of building the model, charged to the search's budget: the entries of
    /// the overlap and member lists, and the buffers.
    pub fn build_work(&self) -> u64 {
        (self.overlaps.items.len() + self.members.items.len() + self.len()) as u64
    }

    /// Number of buffers that live across the boundary between sections `s` and `s + 1`.
    pub fn cuts(&self) -> Vec<u32> {
        let mut cuts = vec![0u32; self.sections];
        for &(a, b) in &self.span {
            for c in &mut cuts[a as usize..(b as usize).saturating_sub(1).max(a as usize)] {
                *c += 1;
            }
        }
        cuts
    }
}

/// The time overlaps of the non-empty buffers. With the buffers sorted by start, the
/// buffers overlapping `i` and starting no earlier are the run right after it that starts
/// before `i` ends: one pass lists every pair once.
fn overlaps(inst: &Instance) -> Rows {
    let n = inst.len();
    let mut order: Vec<Id> = (0..n as Id).filter(|&i| inst.w[i as usize] > 0).collect();
    order.sort_unstable_by_key(|&i| (inst.lower[i as usize], i));
    let lower: Vec<u64> = order.iter().map(|&i| inst.lower[i as usize]).collect();
    Rows::build(n, |emit| {
        for (k, &i) in order.iter().enumerate() {
            let end = inst.upper[i as usize];
            let run = lower[k + 1..].partition_point(|&l| l < end);
            for &j in &order[k + 1..k + 1 + run] {
                emit(i as usize, j);
                emit(j as usize, i);
            }
        }
    })
}

/// Splits the non-empty buffers where no buffer crosses a section boundary; each group
/// lists its buffers by first section.
fn partitions(span: &[(u32, u32)]) -> Vec<Group> {
    let mut order: Vec<Id> = (0..span.len() as Id)
        .filter(|&i| span[i as usize].1 > span[i as usize].0)
        .collect();
    order.sort_by_key(|&i| (span[i as usize].0, i));
    let mut parts: Vec<Group> = Vec::new();
    for i in order {
        let (a, b) = span[i as usize];
        match parts.last_mut() {
            Some(g) if a < g.hi => {
                g.buffers.push(i);
                g.hi = g.hi.max(b);
            }
            _ => parts.push(Group {
                buffers: vec![i],
                lo: a,
                hi: b,
            }),
        }
    }
    parts
}

/// For each buffer, the previous buffer (by index) with the same lifetime and size.
fn twins(inst: &Instance) -> Vec<Id> {
    let n = inst.len();
    let key = |i: usize| (inst.lower[i], inst.upper[i], inst.w[i]);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (key(i), i));
    let mut twin = vec![NO_TWIN; n];
    for pair in order.windows(2) {
        if key(pair[0]) == key(pair[1]) && inst.w[pair[1]] > 0 {
            twin[pair[1]] = pair[0] as Id;
        }
    }
    twin
}
