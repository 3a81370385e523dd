//! What the executor runs: a [`Schedule`] (ops in order, recomputations marked) and a
//! [`Layout`] (a byte offset in one arena for every storage instance of the schedule).
//!
//! Storage instances come from the one memory model, [`sgc_ir::memory::simulate`]: each
//! run of a storage root's producer starts an instance that lives until its last use (or
//! the end, for graph outputs); inputs live from step 0. A layout places every instance;
//! [`Layout::verify`] checks it against the schedule alone (every instance placed once,
//! aligned for its dtype, inside the arena, and no two instances alive at the same step
//! sharing a byte, except an in-place pair: same offset, the input's instance ends at the
//! step where the output's starts, the graph allows the pair
//! ([`sgc_ir::Graph::in_place_allowed`]) and the op's kernel
//! [runs in place](crate::Kernel::runs_in_place)), so the executor never trusts the
//! planner that made it. [`Layout::from_plan`] takes a plan's arena offsets.
//! [`Layout::first_fit`] makes a layout when none is given: instances by decreasing size,
//! each at the lowest aligned offset free over its whole lifetime.

use crate::ExecError;
use sgc_ir::{Graph, OpId, StorageInstance};

/// One step of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub op: OpId,
    /// This run recomputes tensors computed before (counted as recompute time).
    pub recompute: bool,
}

/// Ops in execution order; an op may appear more than once (recomputation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The traced order, each op once: the unplanned schedule.
    pub fn traced(graph: &Graph) -> Self {
        Schedule {
            steps: graph
                .op_ids()
                .map(|op| Step {
                    op,
                    recompute: false,
                })
                .collect(),
        }
    }

    /// A schedule from an op sequence: every run of an op after its first is marked as
    /// a recomputation.
    pub fn from_ops(graph: &Graph, ops: &[OpId]) -> Self {
        let mut seen = vec![false; graph.num_ops()];
        let steps = ops
            .iter()
            .map(|&op| Step {
                op,
                recompute: std::mem::replace(&mut seen[op.index()], true),
            })
            .collect();
        Schedule { steps }
    }

    /// The steps of a plan (its `free` lists are implied by the memory model: every
    /// storage is freed after its last use).
    pub fn from_plan(plan: &sgc_plan::Plan) -> Self {
        let steps = plan
            .steps
            .iter()
            .map(|s| Step {
                op: s.op,
                recompute: s.recompute,
            })
            .collect();
        Schedule { steps }
    }

    /// The op of every step.
    pub fn ops(&self) -> Vec<OpId> {
        self.steps.iter().map(|s| s.op).collect()
    }
}

/// Where one storage instance lives in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub instance: StorageInstance,
    pub offset: u64,
}

/// Offsets of every storage instance of a schedule in one arena of `arena_bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub arena_bytes: u64,
    pub placements: Vec<Placement>,
}

/// Alignment of a storage: the element size of its root's dtype.
fn align_of(graph: &Graph, inst: &StorageInstance) -> u64 {
    graph.tensor(inst.root).dtype.size().max(1)
}

fn lives_together(a: &StorageInstance, b: &StorageInstance) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// Whether `a` and `b` are an in-place pair the executor can run: same offset, one's
/// instance ends where the other's starts, and that step's op may (and can) write the
/// later into the earlier.
fn in_place(graph: &Graph, schedule: &Schedule, a: &Placement, b: &Placement) -> bool {
    let (input, output) = if a.instance.end == b.instance.start {
        (a, b)
    } else if b.instance.end == a.instance.start {
        (b, a)
    } else {
        return false;
    };
    let Some(step) = schedule.steps.get(output.instance.start) else {
        return false;
    };
    a.offset == b.offset
        && graph.in_place_allowed(step.op, output.instance.root, input.instance.root)
        && crate::Kernel::from_op(graph, step.op).is_ok_and(|k| k.runs_in_place())
}

fn bytes_overlap(a: &Placement, b: &Placement) -> bool {
    let (ab, bb) = (a.instance.bytes, b.instance.bytes);
    ab > 0 && bb > 0 && a.offset < b.offset + bb && b.offset < a.offset + ab
}

impl Layout {
    /// The plan's own arena (its `arena` offsets over its `lifetimes`), if it has one.
    pub fn from_plan(plan: &sgc_plan::Plan) -> Result<Option<Layout>, ExecError> {
        let Some(arena) = &plan.arena else {
            return Ok(None);
        };
        if arena.offsets.len() != plan.lifetimes.len() {
            return Err(ExecError::Layout(format!(
                "the plan's arena has {} offsets for {} lifetimes",
                arena.offsets.len(),
                plan.lifetimes.len()
            )));
        }
        let placements = plan
            .lifetimes
            .iter()
            .zip(&arena.offsets)
            .map(|(l, &offset)| Placement {
                instance: StorageInstance {
                    root: l.root,
                    start: l.first_step,
                    end: l.last_step,
                    bytes: l.bytes,
                },
                offset,
            })
            .collect();
        Ok(Some(Layout {
            arena_bytes: arena.size,
            placements,
        }))
    }

    /// First-fit by decreasing size over the schedule's storage instances.
    pub fn first_fit(graph: &Graph, schedule: &Schedule) -> Result<Layout, ExecError> {
        let profile = sgc_ir::simulate(graph, &schedule.ops())?;
        let mut order: Vec<StorageInstance> = profile.instances;
        order.sort_by_key(|i| (std::cmp::Reverse(i.bytes), i.start, i.root));
        let mut placed: Vec<Placement> = Vec::with_capacity(order.len());
        let mut arena = 0u64;
        for inst in order {
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|p| lives_together(&p.instance, &inst))
                .map(|p| (p.offset, p.offset + p.instance.bytes))
                .collect();
            busy.sort_unstable();
            let align = align_of(graph, &inst);
            let mut offset = 0u64;
            for (lo, hi) in busy {
                if offset + inst.bytes <= lo {
                    break;
                }
                offset = offset.max(hi.next_multiple_of(align));
            }
            arena = arena.max(offset + inst.bytes);
            placed.push(Placement {
                instance: inst,
                offset,
            });
        }
        placed.sort_by_key(|p| (p.instance.start, p.instance.root));
        Ok(Layout {
            arena_bytes: arena,
            placements: placed,
        })
    }

    /// Checks this layout against `schedule` alone; the error names the tensors concerned.
    pub fn verify(&self, graph: &Graph, schedule: &Schedule) -> Result<(), ExecError> {
        let profile = sgc_ir::simulate(graph, &schedule.ops())?;
        let name = |p: &Placement| graph.tensor(p.instance.root).name.clone();
        let mut expected = profile.instances.clone();
        let mut got: Vec<StorageInstance> = self.placements.iter().map(|p| p.instance).collect();
        expected.sort_by_key(|i| (i.root, i.start));
        got.sort_by_key(|i| (i.root, i.start));
        if expected != got {
            return Err(ExecError::Layout(format!(
                "the layout places {} storage instances, the schedule has {} (or their lifetimes differ)",
                got.len(),
                expected.len()
            )));
        }
        for p in &self.placements {
            if p.offset % align_of(graph, &p.instance) != 0
                || p.offset + p.instance.bytes > self.arena_bytes
            {
                return Err(ExecError::Layout(format!(
                    "`{}` at offset {} ({} bytes) is misaligned or outside the {}-byte arena",
                    name(p),
                    p.offset,
                    p.instance.bytes,
                    self.arena_bytes
                )));
            }
        }
        let mut by_start: Vec<&Placement> = self.placements.iter().collect();
        by_start.sort_by_key(|p| p.instance.start);
        for (i, a) in by_start.iter().enumerate() {
            for b in by_start[i + 1..]
                .iter()
                .take_while(|b| b.instance.start <= a.instance.end)
            {
                if bytes_overlap(a, b) && !in_place(graph, schedule, a, b) {
                    return Err(ExecError::Layout(format!(
                        "`{}` (steps {}..={}) and `{}` (steps {}..={}) share bytes while both are live",
                        name(a),
                        a.instance.start,
                        a.instance.end,
                        name(b),
                        b.instance.start,
                        b.instance.end
                    )));
                }
            }
        }
        Ok(())
    }

    /// The offset of the instance of `root` that starts at step `start`.
    pub fn offset_of(&self, root: sgc_ir::TensorId, start: usize) -> Option<u64> {
        self.placements
            .iter()
            .find(|p| p.instance.root == root && p.instance.start == start)
            .map(|p| p.offset)
    }
}
