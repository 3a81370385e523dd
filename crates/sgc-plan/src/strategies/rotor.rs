//! The `rotor` strategy: Rotor's dynamic program for chains (Beaumont, Eyraud-Dubois,
//! Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous chains", 2019), the
//! persistent variant whose checkpoints are either a stage's output `x_i` or all of a
//! stage's activations `x̄_i`.
//!
//! **Stages.** The forward ops (a prefix of the traced order) are cut after position `i`
//! when exactly one activation root made by the current stage is read by a later forward
//! op (or none is; roots that stay resident, below, do not count): every later forward op
//! depends on what came before only through that root, the stage's output `x_i`. A
//! stage's forward therefore reads only the previous stage's output, graph inputs and
//! parameters (a skip connection inside the forward makes one stage of everything it
//! spans). Each backward op is given to the latest stage `k`
//! such that everything it reads of the forward was made by stage `k` or is `x_{k-1}`;
//! one that reads no activation goes with the op before it. The graph is a chain when
//! every backward op has such a stage and the stages' backward groups come in reverse
//! stage order along the traced order; otherwise [`NotAChain`] says why.
//!
//! **Ops that may not run again.** A forward op that draws random numbers (dropout) or
//! writes state (batch norm's running statistics copied back in place) runs once: the roots
//! it makes stay resident from that run to their last read and count with the bytes outside
//! the chain. A stage run again after its first run repeats only the ops that remake what
//! is read after the stage (its output, what its backward group reads, views of them), and
//! the ops those depend on within the stage; so not the op that may not run again, nor one
//! whose outputs only such an op reads (the statistics update before the copy). Views that
//! later stages took of the stage's roots are taken again after it (a view is stale once its
//! storage is made again), except where they would be taken again before anything reads
//! them. A schedule that would still run an op again after a state write it depends on
//! (the verifier's rule, [`Context::dirty_at`]) is not a candidate.
//!
//! **The program.** `C(s, t, m)` is the least forward cost that runs the backward groups
//! of stages `t` down to `s`, given `x_{s-1}` held and `m` memory slots for everything
//! else (the non-chain bytes alive then, such as gradients and graph inputs, included). Its
//! choices: (leaf, `s = t`) run stage `s` again and its backward group, or only the group
//! when it reads no activation of stage `s`; (`x̄`) run stage `s`, keep all of its
//! activations, solve `C(s+1, t, m - x̄_s)` (plus `x_{s-1}` when no backward op reads it:
//! it is freed), then the group of `s`; (`x_j`) run stages `s` to `j-1` keeping only their
//! outputs, keep `x_{j-1}`, solve `C(j, t, m - x_{j-1})` and then `C(s, j-1, m)`. One
//! choice goes beyond the paper's: (`x̄_j`, `s < j < t`) run stages `s` to `j`, keep all of
//! stage `j`'s activations but not its input, solve `C(j+1, t, m - x̄_j)`, then `H(s, j)`:
//! the same program with the activations of stage `j` that its group reads held, whose
//! leaf at `j` runs the group only (its input made again from `x_{s-1}`). Checkmate's
//! optimum takes this shape on VGG16 (it keeps a convolution's output and recomputes the
//! pooling before it), and without it Rotor recomputes more there. The first sweep of the
//! forward is the same recursion over stages not yet run (`fresh`), where the leaf always
//! runs its stage. A stage's cost is the sum of the costs of the ops a run after its first
//! repeats ([`Context::cost_units`], exact integers). Every stage's first run is in every
//! schedule, so the program's cost is the plan's recompute plus the same constant for all.
//!
//! **Memory.** Every figure the program checks is measured with sgc's memory model: a
//! stage's forward peak (its activations alive at each of its ops, freed at their last
//! forward read, or kept for the backward), the non-chain bytes alive where a backward
//! group starts (the traced order's instances, which do not depend on the recomputation),
//! and each group's own peak (its stage's activations and the non-chain bytes). Memory is
//! counted in slots of `q` bytes: `q` is the greatest common divisor of all these figures
//! when that gives at most [`MAX_SLOTS`] slots (then every check is exact), else
//! `ceil(bytes / MAX_SLOTS)` with every figure rounded up and a freed input rounded down
//! (each check then errs high by less than one slot per term it adds, at most five). The
//! program is solved once for every slot count up to twice the larger of the budget and
//! the unplanned peak (its estimate can exceed sgc's peak); every distinct
//! schedule it gives is simulated by sgc's memory model and the one recomputing least
//! whose peak (or device bytes) fits the budget is the plan. This is Rotor's "lower the
//! budget and retry" made exhaustive: where the program's estimate and sgc's peak differ,
//! a schedule chosen at a lower or higher slot count is still found.
//!
//! **Cost.** `L` stages and `S` slots: a table of `2 L² S` cells, each choosing among
//! `2 L` checkpoints, `O(L³ S)` time; [`MAX_CELLS`] bounds the table (fewer slots for longer
//! chains, down to [`MIN_SLOTS`]).

use super::{Name, Scheduled, Strategy};
use crate::context::{Context, NO_HAZARD};
use crate::device;
use crate::error::{LowerBoundKind, NotAChain, PlanError, Retry};
use crate::options::{BudgetOf, PlanOptions, RunConfig};
use sgc_ir::{OpId, TensorId};
use std::collections::BTreeSet;
use std::ops::Range;

/// The most memory slots of the program.
pub const MAX_SLOTS: u64 = 4096;
/// The fewest slots the program runs with (a longer chain is refused).
pub const MIN_SLOTS: u64 = 32;
/// The most cells (stage pairs times slots) of the program's table.
pub const MAX_CELLS: u64 = 1 << 22;
/// The most stages of a chain the program takes (its time grows as the cube).
pub const MAX_STAGES: usize = 200;
// A chain of at most MAX_STAGES stages gets at least MIN_SLOTS slots within MAX_CELLS.
const _: () = {
    let l = MAX_STAGES as u64;
    assert!((2 * l * l + l) * MIN_SLOTS <= MAX_CELLS);
};

/// One stage: a range of forward ops and what the program needs of it, in bytes.
#[derive(Clone, Debug, Default)]
struct Stage {
    ops: Range<usize>,
    /// Its ops' cost units.
    units: u64,
    /// Its output `x_k` (none: no later forward op reads what it made).
    out: Option<TensorId>,
    /// Whether its backward group reads any of its activations.
    need: bool,
    /// Bytes of `x_k`.
    a: u64,
    /// Bytes kept by running it keeping everything its group reads, and `x_k`.
    abar: u64,
    /// Forward peak keeping only `x_k`, its input excluded / included.
    fwd_excl: u64,
    fwd_incl: u64,
    /// Forward peak keeping everything its group reads, its input excluded / included.
    fwd_all: u64,
    fwd_all_incl: u64,
    /// Bytes its backward group reads of its own activations (held once `x_k`'s other
    /// readers are done).
    keep: u64,
    /// Bytes of its input `x_{k-1}` when neither its group nor the previous stage's reads
    /// it: once it has run keeping its activations, its input is no longer needed.
    input_free: u64,
    /// Non-chain bytes alive where its backward group starts.
    bg: u64,
    /// Peak of its backward group (non-chain bytes and its own activations).
    bwd: u64,
}

/// A chain: stages in forward order, each stage's backward group (traced positions), and
/// the ops each stage runs again (module doc, "Ops that may not run again").
struct Chain {
    stages: Vec<Stage>,
    groups: Vec<Range<usize>>,
    reruns: Vec<Vec<usize>>,
    /// Per stage: the later forward ops that take views of its roots, run again after it
    /// is (a view is stale once its storage is made again).
    views: Vec<Vec<usize>>,
}

/// A schedule: ops in order, with whether each run is a recomputation.
type Steps = Vec<(OpId, bool)>;

/// Per root: the stage that makes it (chain roots only).
type StageOf = Vec<Option<usize>>;

pub struct Rotor;

impl Strategy for Rotor {
    fn name(&self) -> Name {
        Name::Rotor
    }

    fn about(&self) -> &'static str {
        "Rotor's dynamic program for chains (Beaumont et al. 2019): the least recompute within the budget among its schedules"
    }

    fn needs_budget(&self) -> bool {
        true
    }

    fn searches_budget(&self) -> bool {
        true
    }

    fn schedule(
        &self,
        ctx: &Context<'_>,
        options: &PlanOptions,
        _: &RunConfig<'_>,
    ) -> Result<Scheduled, PlanError> {
        schedule(ctx, options).map(Scheduled::of)
    }
}

/// The `rotor` strategy: the least-recompute schedule of Rotor's program whose peak (or
/// device bytes, per `options.budget_of`) fits `options.budget`.
fn schedule(ctx: &Context<'_>, options: &PlanOptions) -> Result<Vec<(OpId, bool)>, PlanError> {
    let budget = super::needed_budget(options)?;
    let chain = chain_of(ctx).map_err(PlanError::NotAChain)?;
    // The program's estimate errs high (non-chain bytes of a later group while a stage
    // runs forward), so its slot counts run to twice the larger of budget and unplanned peak.
    let top = 2 * budget
        .max(ctx.unplanned_peak)
        .saturating_sub(ctx.persistent_bytes);
    let q = slot_bytes(&chain.stages, top);
    let table = Table::solve(&slotted(&chain.stages, q), top / q);
    choose(ctx, options, &chain, &table, top / q, budget)
}

/// Every distinct schedule of the program, from `slots` down, simulated: the one
/// recomputing least that fits `budget` (the lower peak on ties), or the lowest peak seen.
fn choose(
    ctx: &Context<'_>,
    options: &PlanOptions,
    chain: &Chain,
    table: &Table,
    slots: u64,
    budget: u64,
) -> Result<Vec<(OpId, bool)>, PlanError> {
    // The cost, peak and steps of the best schedule so far.
    let mut best: Option<(u64, u64, Steps)> = None;
    let mut seen = BTreeSet::new();
    let mut lowest = ctx.unplanned_peak;
    // The least device bytes of a schedule whose peak fits (the others' are above the budget).
    let mut lowest_device: Option<u64> = None;
    for m in (0..=slots).rev() {
        let Some(cost) = table.cost(m) else {
            continue;
        };
        let steps = steps_of(ctx, chain, &table.actions(m));
        if best.as_ref().is_some_and(|b| b.0 < cost)
            || !seen.insert(steps.clone())
            || !safe(ctx, &steps)
        {
            continue;
        }
        let (peak, device) = measured(ctx, options, &steps, budget)?;
        let fits = peak <= budget && device.is_none_or(|d| d <= budget);
        lowest = lowest.min(peak);
        lowest_device = match (lowest_device, device) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if fits && best.as_ref().is_none_or(|b| (cost, peak) < (b.0, b.1)) {
            best = Some((cost, peak, steps));
        }
    }
    best.map(|b| b.2).ok_or(PlanError::BudgetNotMet {
        budget,
        of: options.budget_of,
        best_peak: lowest,
        best_device: lowest_device,
        lower_bound: ctx.lower_bound.bytes,
        bound: LowerBoundKind::PerOp,
        offload: None,
        retry: Retry::Strategy,
    })
}

/// The peak of `steps`, and for a device budget its device bytes when the peak is within
/// the budget (else they are above it too, and not placed).
fn measured(
    ctx: &Context<'_>,
    options: &PlanOptions,
    steps: &[(OpId, bool)],
    budget: u64,
) -> Result<(u64, Option<u64>), PlanError> {
    let ops: Vec<OpId> = steps.iter().map(|s| s.0).collect();
    let peak = sgc_ir::simulate(ctx.g, &ops)?.peak;
    let device = match options.budget_of == BudgetOf::Device && peak <= budget {
        true => Some(device::device_bytes(ctx, options, steps)?),
        false => None,
    };
    Ok((peak, device))
}

/// The chain of `ctx`'s graph in Rotor's sense (module doc), or why it is not one.
fn chain_of(ctx: &Context<'_>) -> Result<Chain, NotAChain> {
    let nf = forward_len(ctx)?;
    let chained = chained_roots(ctx, nf);
    let stage_of_op = cut_stages(ctx, nf, &chained);
    let mut stages = stage_ranges(ctx, &stage_of_op, &chained);
    if stages.len() > MAX_STAGES {
        return Err(NotAChain::TooLong {
            stages: stages.len(),
            most: MAX_STAGES,
        });
    }
    let mut stage_of: StageOf = vec![None; ctx.g.num_tensors()];
    for (k, s) in stages.iter().enumerate() {
        for i in s.ops.clone() {
            // The roots the op makes: a view op's roots are made elsewhere.
            for &r in &ctx.out_roots[i] {
                if chained[r.index()] && ctx.g.producer(r) == Some(OpId::new(i)) {
                    stage_of[r.index()] = Some(k);
                }
            }
        }
    }
    let group_of = backward_groups(ctx, nf, &stages, &stage_of)?;
    let groups = group_ranges(ctx.n, nf, stages.len(), &group_of);
    let reruns = rerun_ops(ctx, &stages);
    let views = later_views(ctx, nf, &stages, &stage_of);
    measure(ctx, &mut stages, &groups, &stage_of, &reruns);
    Ok(Chain {
        stages,
        groups,
        reruns,
        views,
    })
}

/// Per stage: the forward ops after it that only take views of its roots (every output a
/// view, of a storage the stage makes), in traced order.
fn later_views(
    ctx: &Context<'_>,
    nf: usize,
    stages: &[Stage],
    stage_of: &StageOf,
) -> Vec<Vec<usize>> {
    let g = ctx.g;
    let mut views = vec![Vec::new(); stages.len()];
    for (j, op) in g.ops().iter().enumerate().take(nf) {
        let only_views =
            !op.outputs.is_empty() && op.outputs.iter().all(|&t| g.tensor(t).alias_of.is_some());
        if !(only_views && ctx.rerunnable[j]) {
            continue;
        }
        let of = op
            .outputs
            .iter()
            .find_map(|&t| stage_of[g.storage_root(t).index()]);
        if let Some(k) = of.filter(|&k| j >= stages[k].ops.end) {
            views[k].push(j);
        }
    }
    views
}

/// Per tensor: whether it is a root of the chain, one a schedule may free and make again:
/// freeable, and made by an op that may run again. A root made by a forward op that may
/// not (it draws random numbers, or writes state) stays resident from its one run to its
/// last read, with the bytes outside the chain.
fn chained_roots(ctx: &Context<'_>, nf: usize) -> Vec<bool> {
    let mut chained = ctx.freeable.clone();
    for i in (0..nf).filter(|&i| !ctx.rerunnable[i]) {
        for &r in &ctx.out_roots[i] {
            chained[r.index()] = false;
        }
    }
    chained
}

/// Per stage: the ops a run after its first repeats, in traced order. A later run remakes
/// what is read after the stage (its output, the roots its backward group reads, views of
/// them), so it repeats the ops those depend on within the stage, and not the others: not
/// an op that may not run again or makes only graph outputs (its outputs stayed resident:
/// [`Context::keeps_what_it_makes`]), nor one whose outputs only such ops read (the running
/// statistics a batch norm writes back).
fn rerun_ops(ctx: &Context<'_>, stages: &[Stage]) -> Vec<Vec<usize>> {
    let g = ctx.g;
    // Per tensor: the last traced position that reads it.
    let mut last_read = vec![None; g.num_tensors()];
    for (i, op) in g.ops().iter().enumerate() {
        for &t in &op.inputs {
            last_read[t.index()] = Some(i);
        }
    }
    let mut needed = vec![false; g.num_tensors()];
    stages
        .iter()
        .map(|s| {
            let mut ops: Vec<usize> = s
                .ops
                .clone()
                .rev()
                .filter(|&i| {
                    let op = g.op(OpId::new(i));
                    let used = |t: &TensorId| {
                        needed[t.index()] || last_read[t.index()].is_some_and(|r| r >= s.ops.end)
                    };
                    let again =
                        !ctx.keeps_what_it_makes(OpId::new(i)) && op.outputs.iter().any(used);
                    if again {
                        for &t in &op.inputs {
                            needed[t.index()] = true;
                        }
                    }
                    again
                })
                .collect();
            ops.reverse();
            ops
        })
        .collect()
}

/// The length of the forward prefix.
fn forward_len(ctx: &Context<'_>) -> Result<usize, NotAChain> {
    let nf = ctx.forward.iter().take_while(|&&f| f).count();
    if nf == 0 || nf == ctx.n {
        return Err(NotAChain::NoBackward);
    }
    if let Some(i) = (nf..ctx.n).find(|&i| ctx.forward[i]) {
        return Err(NotAChain::Interleaved {
            op: ctx.g.op(OpId::new(nf)).name.clone(),
            before: ctx.g.op(OpId::new(i)).name.clone(),
        });
    }
    Ok(nf)
}

/// Per forward op, its stage: a cut after op `i` where at most one root made since the
/// last cut, and no earlier root, is read by a later forward op.
fn cut_stages(ctx: &Context<'_>, nf: usize, chained: &[bool]) -> Vec<usize> {
    let last = last_forward_read(ctx, nf);
    let mut open: BTreeSet<(usize, TensorId)> = BTreeSet::new();
    let mut stage = Vec::with_capacity(nf);
    let (mut k, mut begin) = (0, 0);
    for i in 0..nf {
        stage.push(k);
        for &r in &ctx.out_roots[i] {
            if chained[r.index()] && last[r.index()] > i {
                open.insert((last[r.index()], r));
            }
        }
        while open.first().is_some_and(|&(l, _)| l <= i) {
            open.pop_first();
        }
        let made_here = |r: TensorId| ctx.g.producer(r).is_some_and(|p| p.index() >= begin);
        if i + 1 < nf
            && (open.is_empty() || (open.len() == 1 && made_here(open.first().unwrap().1)))
        {
            k += 1;
            begin = i + 1;
        }
    }
    stage
}

/// Per root: the last forward position that reads it (0 when none does).
fn last_forward_read(ctx: &Context<'_>, nf: usize) -> Vec<usize> {
    let mut last = vec![0; ctx.g.num_tensors()];
    for i in 0..nf {
        for &r in &ctx.in_roots[i] {
            last[r.index()] = i;
        }
    }
    last
}

/// The stages' op ranges, costs and outputs; a graph output is allowed in the last only.
fn stage_ranges(ctx: &Context<'_>, stage_of_op: &[usize], chained: &[bool]) -> Vec<Stage> {
    let count = stage_of_op.last().map_or(0, |&k| k + 1);
    let mut stages: Vec<Stage> = vec![Stage::default(); count];
    for (i, &k) in stage_of_op.iter().enumerate() {
        let s = &mut stages[k];
        if s.ops.is_empty() {
            s.ops = i..i;
        }
        s.ops.end = i + 1;
    }
    let last = last_forward_read(ctx, stage_of_op.len());
    for s in &mut stages {
        s.out = s
            .ops
            .clone()
            .flat_map(|i| ctx.out_roots[i].iter().copied())
            .find(|r| chained[r.index()] && last[r.index()] >= s.ops.end);
    }
    stages
}

/// Per non-forward position: its stage's backward group (module doc).
fn backward_groups(
    ctx: &Context<'_>,
    nf: usize,
    stages: &[Stage],
    stage_of: &StageOf,
) -> Result<Vec<usize>, NotAChain> {
    let name = |t: TensorId| ctx.g.tensor(t).name.clone();
    for (k, s) in stages.iter().enumerate() {
        if k + 1 < stages.len() {
            if let Some(i) = s
                .ops
                .clone()
                .find(|&i| ctx.out_roots[i].iter().any(|r| ctx.kept[r.index()]))
            {
                return Err(NotAChain::OutputMidChain {
                    op: ctx.g.op(OpId::new(i)).name.clone(),
                });
            }
        }
    }
    let mut group = stages.len() - 1;
    let mut out = Vec::with_capacity(ctx.n - nf);
    for i in nf..ctx.n {
        let reads: Vec<(TensorId, usize)> = ctx.in_roots[i]
            .iter()
            .filter_map(|&r| stage_of[r.index()].map(|k| (r, k)))
            .collect();
        if reads.is_empty() {
            out.push(group);
            continue;
        }
        let op = || ctx.g.op(OpId::new(i)).name.clone();
        // The latest stage whose activations and input hold every read.
        let fits = |g: usize| {
            reads
                .iter()
                .all(|&(r, k)| k == g || (k + 1 == g && stages[k].out == Some(r)))
        };
        let Some(g) = reads
            .iter()
            .flat_map(|&(_, k)| [k + 1, k])
            .filter(|&g| g < stages.len() && fits(g))
            .max()
        else {
            let lo = reads.iter().min_by_key(|p| p.1).map(|p| p.0);
            let hi = reads.iter().max_by_key(|p| p.1).map(|p| p.0);
            return Err(NotAChain::ReadsTwoStages {
                op: op(),
                a: lo.map(name).unwrap_or_default(),
                b: hi.map(name).unwrap_or_default(),
            });
        };
        if g > group {
            return Err(NotAChain::OutOfOrder { op: op() });
        }
        group = g;
        out.push(group);
    }
    Ok(out)
}

/// Each stage's backward group as a range of traced positions (empty ones where the next
/// lower stage's starts).
fn group_ranges(n: usize, nf: usize, stages: usize, group_of: &[usize]) -> Vec<Range<usize>> {
    let mut ranges = vec![n..n; stages];
    for (j, &k) in group_of.iter().enumerate().rev() {
        let p = nf + j;
        if ranges[k].start == ranges[k].end {
            ranges[k] = p..p + 1;
        } else {
            ranges[k].start = p;
        }
    }
    let mut next = n;
    for r in ranges.iter_mut() {
        if r.start == r.end {
            *r = next..next;
        }
        next = r.start;
    }
    ranges
}

/// Fills in each stage's bytes (module doc, "Memory"), from the traced order's profile.
fn measure(
    ctx: &Context<'_>,
    stages: &mut [Stage],
    groups: &[Range<usize>],
    stage_of: &StageOf,
    reruns: &[Vec<usize>],
) {
    let order: Vec<OpId> = (0..ctx.n).map(OpId::new).collect();
    let profile = sgc_ir::simulate(ctx.g, &order).expect("the traced order runs");
    let mut other = vec![0i64; ctx.n + 1];
    for inst in profile
        .instances
        .iter()
        .filter(|i| stage_of[i.root.index()].is_none())
    {
        other[inst.start] += inst.bytes as i64;
        other[inst.end + 1] -= inst.bytes as i64;
    }
    let mut live = 0i64;
    let other: Vec<u64> = other[..ctx.n]
        .iter()
        .map(|d| {
            live += d;
            live as u64
        })
        .collect();
    let crossing = |p: usize| {
        profile
            .instances
            .iter()
            .filter(|i| stage_of[i.root.index()].is_none() && i.start < p && i.end >= p)
            .map(|i| i.bytes)
            .sum::<u64>()
    };
    let read_by_group = group_reads(ctx, groups, stage_of);
    for (k, s) in stages.iter_mut().enumerate() {
        let kept: Vec<TensorId> = read_by_group[k].iter().copied().collect();
        s.need = !kept.is_empty();
        s.units = reruns[k].iter().map(|&i| ctx.cost_units[i]).sum();
        s.keep = kept.iter().map(|&r| ctx.size(r)).sum();
        s.a = s.out.map_or(0, |r| ctx.size(r));
        s.abar = kept
            .iter()
            .filter(|&&r| Some(r) != s.out)
            .map(|&r| ctx.size(r))
            .sum::<u64>()
            + s.a;
        s.fwd_excl = forward_peak(ctx, s, stage_of, None, &[]);
        s.fwd_all = forward_peak(ctx, s, stage_of, None, &kept);
        s.bg = crossing(groups[k].start.min(ctx.n - 1));
        s.bwd = groups[k]
            .clone()
            .map(|p| {
                other[p]
                    + profile
                        .instances
                        .iter()
                        .filter(|i| {
                            stage_of[i.root.index()] == Some(k) && i.start <= p && i.end >= p
                        })
                        .map(|i| i.bytes)
                        .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
    }
    for k in 0..stages.len() {
        let input = k.checked_sub(1).and_then(|j| stages[j].out);
        let read = |x: TensorId| {
            read_by_group[k - 1].contains(&x)
                || groups[k].clone().any(|p| ctx.in_roots[p].contains(&x))
        };
        stages[k].input_free = input.filter(|&x| !read(x)).map_or(0, |x| ctx.size(x));
        stages[k].fwd_incl = forward_peak(ctx, &stages[k], stage_of, input, &[]);
        let kept: Vec<TensorId> = read_by_group[k].iter().copied().collect();
        stages[k].fwd_all_incl = forward_peak(ctx, &stages[k], stage_of, input, &kept);
    }
}

/// Per stage: the roots it makes that its backward group reads.
fn group_reads(
    ctx: &Context<'_>,
    groups: &[Range<usize>],
    stage_of: &StageOf,
) -> Vec<BTreeSet<TensorId>> {
    let mut reads = vec![BTreeSet::new(); groups.len()];
    for (k, g) in groups.iter().enumerate() {
        for p in g.clone() {
            reads[k].extend(
                ctx.in_roots[p]
                    .iter()
                    .filter(|r| stage_of[r.index()] == Some(k)),
            );
        }
    }
    reads
}

/// The peak of a stage's chain bytes while it runs: its input (when given) until its last
/// read, each root it makes until its last forward read, its output and `kept` to the end.
fn forward_peak(
    ctx: &Context<'_>,
    s: &Stage,
    stage_of: &StageOf,
    input: Option<TensorId>,
    kept: &[TensorId],
) -> u64 {
    let last = |r: TensorId| {
        s.ops
            .clone()
            .filter(|&i| ctx.in_roots[i].contains(&r))
            .max()
    };
    let mut live: Vec<(usize, usize, u64)> = Vec::new();
    if let Some(x) = input {
        live.push((s.ops.start, last(x).unwrap_or(s.ops.start), ctx.size(x)));
    }
    for i in s.ops.clone() {
        for &r in ctx.out_roots[i]
            .iter()
            .filter(|r| stage_of[r.index()].is_some())
        {
            let end = if Some(r) == s.out || kept.contains(&r) {
                s.ops.end
            } else {
                last(r).unwrap_or(i).max(i)
            };
            live.push((i, end, ctx.size(r)));
        }
    }
    s.ops
        .clone()
        .map(|i| {
            live.iter()
                .filter(|l| l.0 <= i && i <= l.1)
                .map(|l| l.2)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The slot size: the greatest common divisor of every figure when that gives at most
/// [`MAX_SLOTS`] slots up to `top` bytes, else `top / MAX_SLOTS` rounded up; fewer slots
/// for a long chain ([`MAX_CELLS`]).
fn slot_bytes(stages: &[Stage], top: u64) -> u64 {
    let l = stages.len() as u64;
    let slots = (MAX_CELLS / (2 * l * l + l).max(1)).min(MAX_SLOTS);
    let g = stages
        .iter()
        .flat_map(|s| {
            let all = [s.fwd_all, s.fwd_all_incl, s.keep, s.input_free];
            [s.a, s.abar, s.fwd_excl, s.fwd_incl, s.bg, s.bwd]
                .into_iter()
                .chain(all)
        })
        .fold(0, gcd)
        .max(1);
    if top / g <= slots {
        g
    } else {
        top.div_ceil(slots).max(1)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The stages' figures in slots of `q` bytes, rounded up.
fn slotted(stages: &[Stage], q: u64) -> Vec<Stage> {
    stages
        .iter()
        .map(|s| Stage {
            a: s.a.div_ceil(q),
            abar: s.abar.div_ceil(q),
            fwd_excl: s.fwd_excl.div_ceil(q),
            fwd_incl: s.fwd_incl.div_ceil(q),
            fwd_all: s.fwd_all.div_ceil(q),
            fwd_all_incl: s.fwd_all_incl.div_ceil(q),
            keep: s.keep.div_ceil(q),
            input_free: s.input_free / q,
            bg: s.bg.div_ceil(q),
            bwd: s.bwd.div_ceil(q),
            ..s.clone()
        })
        .collect()
}

/// What the schedule does, in Rotor's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Run a stage's forward ops.
    Forward(usize),
    /// Run a stage's backward group.
    Backward(usize),
}

/// A choice of the program for a subchain: leaf, keep all of the first stage, keep the
/// input of stage `j`, or keep all of stage `j` and make its input again later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Leaf,
    All,
    Input(u32),
    Bar(u32),
}

/// A subchain's state: its stages have run (`Run`), have not run yet (`Fresh`, only for
/// subchains that end at the last stage), or have run and the last stage's activations
/// that its backward reads are held (`Held`, outside the subchain's slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Run,
    Fresh,
    Held,
}

const INF: u64 = u64::MAX;

/// The program's table: for each subchain `(s, t)` and kind, and each slot count, the
/// least cost and its choice.
struct Table {
    stages: Vec<Stage>,
    slots: usize,
    cost: Vec<Vec<u64>>,
    choice: Vec<Vec<Choice>>,
}

impl Table {
    fn solve(stages: &[Stage], slots: u64) -> Table {
        let l = stages.len();
        let slots = slots as usize + 1;
        let mut t = Table {
            stages: stages.to_vec(),
            slots,
            cost: vec![Vec::new(); 2 * l * l + l],
            choice: vec![Vec::new(); 2 * l * l + l],
        };
        for len in 0..l {
            for s in 0..l - len {
                t.fill(s, s + len, Kind::Run);
                t.fill(s, s + len, Kind::Held);
                if s + len == l - 1 {
                    t.fill(s, l - 1, Kind::Fresh);
                }
            }
        }
        t
    }

    fn index(&self, s: usize, t: usize, kind: Kind) -> usize {
        let l = self.stages.len();
        match kind {
            Kind::Run => s * l + t,
            Kind::Fresh => l * l + s,
            Kind::Held => l * l + l + s * l + t,
        }
    }

    fn at(&self, s: usize, t: usize, kind: Kind, m: u64) -> u64 {
        self.cost[self.index(s, t, kind)][m as usize]
    }

    /// The cost of the whole chain, its stages not yet run, within `m` slots.
    fn cost(&self, m: u64) -> Option<u64> {
        let c = self.at(0, self.stages.len() - 1, Kind::Fresh, m);
        (c != INF).then_some(c)
    }

    fn fill(&mut self, s: usize, t: usize, kind: Kind) {
        let (mut cost, mut choice) = (vec![INF; self.slots], vec![Choice::Leaf; self.slots]);
        for m in 0..self.slots as u64 {
            (cost[m as usize], choice[m as usize]) = self.best(s, t, kind, m);
        }
        let i = self.index(s, t, kind);
        self.cost[i] = cost;
        self.choice[i] = choice;
    }

    /// The least cost of subchain `(s, t)` of `kind` within `m` slots, and its choice.
    fn best(&self, s: usize, t: usize, kind: Kind, m: u64) -> (u64, Choice) {
        if s == t {
            return (self.leaf(s, kind, m), Choice::Leaf);
        }
        let st = &self.stages;
        let mut best = (INF, Choice::Leaf);
        if st[s].bwd <= m && st[t].bg + st[s].fwd_all <= m && st[s].abar <= m {
            let rest = self.at(s + 1, t, kind, self.freed(s, m - st[s].abar));
            best = (add(st[s].units, rest), Choice::All);
        }
        let (mut units, mut ok) = (0, st[t].bg + st[s].fwd_excl <= m);
        for j in s + 1..=t {
            if kind != Kind::Held && j < t {
                let c = self.bar(s, j, t, kind, m, units, ok);
                if c < best.0 {
                    best = (c, Choice::Bar(j as u32));
                }
            }
            units += st[j - 1].units;
            if j - 1 > s {
                ok &= st[t].bg + st[j - 1].fwd_incl <= m;
            }
            let a = st[j - 1].a;
            if !ok || a > m {
                break;
            }
            let right = self.at(j, t, kind, m - a);
            let c = add(units, add(right, self.at(s, j - 1, Kind::Run, m)));
            if c < best.0 {
                best = (c, Choice::Input(j as u32));
            }
        }
        best
    }

    /// The slots of a subchain after stage `s` ran keeping its activations: its input
    /// freed when no backward op reads it (within the table).
    fn freed(&self, s: usize, m: u64) -> u64 {
        (m + self.stages[s].input_free).min(self.slots as u64 - 1)
    }

    /// A leaf: stage `s` runs again when its group reads its activations (or it has not run
    /// yet), then its group; with `Held`, its group only.
    fn leaf(&self, s: usize, kind: Kind, m: u64) -> u64 {
        let st = &self.stages[s];
        let run = kind == Kind::Fresh || (kind == Kind::Run && st.need);
        let held = if kind == Kind::Held { st.keep } else { 0 };
        let ok = st.bwd <= m + held && (!run || st.bg + st.fwd_all <= m);
        match (ok, run) {
            (false, _) => INF,
            (true, true) => st.units,
            (true, false) => 0,
        }
    }

    /// The `Bar(j)` choice: stages `s` to `j-1` run keeping only their outputs (`units` of
    /// cost, `ok` their memory), stage `j` runs keeping what its group reads and its
    /// output, `(j+1, t)` is solved, then `(s, j)` with stage `j`'s activations held.
    #[allow(clippy::too_many_arguments)]
    fn bar(&self, s: usize, j: usize, t: usize, kind: Kind, m: u64, units: u64, ok: bool) -> u64 {
        let st = &self.stages;
        let sweep = if j - 1 > s {
            st[j - 1].fwd_incl
        } else {
            st[s].fwd_excl
        };
        let fwd = st[j].fwd_all_incl;
        if !ok || st[t].bg + sweep > m || st[t].bg + fwd > m || st[j].abar > m || st[j].keep > m {
            return INF;
        }
        let right = self.at(j + 1, t, kind, m - st[j].abar);
        let left = self.at(s, j, Kind::Held, m - st[j].keep);
        add(units + st[j - 1].units + st[j].units, add(right, left))
    }

    /// The actions of the whole chain's solution within `m` slots.
    fn actions(&self, m: u64) -> Vec<Action> {
        let mut out = Vec::new();
        self.walk(0, self.stages.len() - 1, Kind::Fresh, m, &mut out);
        out
    }

    fn walk(&self, s: usize, t: usize, kind: Kind, m: u64, out: &mut Vec<Action>) {
        let st = &self.stages;
        match self.choice[self.index(s, t, kind)][m as usize] {
            Choice::Leaf => {
                if kind == Kind::Fresh || (kind == Kind::Run && st[s].need) {
                    out.push(Action::Forward(s));
                }
                out.push(Action::Backward(s));
            }
            Choice::All => {
                out.push(Action::Forward(s));
                self.walk(s + 1, t, kind, self.freed(s, m - st[s].abar), out);
                out.push(Action::Backward(s));
            }
            Choice::Input(j) => {
                let j = j as usize;
                out.extend((s..j).map(Action::Forward));
                self.walk(j, t, kind, m - st[j - 1].a, out);
                self.walk(s, j - 1, Kind::Run, m, out);
            }
            Choice::Bar(j) => {
                let j = j as usize;
                out.extend((s..=j).map(Action::Forward));
                self.walk(j + 1, t, kind, m - st[j].abar, out);
                self.walk(s, j, Kind::Held, m - st[j].keep, out);
            }
        }
    }
}

fn add(a: u64, b: u64) -> u64 {
    if a == INF || b == INF {
        INF
    } else {
        a + b
    }
}

/// The schedule of a solution: a stage's forward ops (all of them the first time, its
/// [`Chain::reruns`] after that) or its backward group, in traced order; every run of an
/// op after its first is a recomputation.
fn steps_of(ctx: &Context<'_>, chain: &Chain, actions: &[Action]) -> Vec<(OpId, bool)> {
    let mut seen = vec![false; ctx.n];
    let mut steps = Vec::with_capacity(ctx.n * 2);
    for a in actions {
        let ops: Vec<usize> = match *a {
            Action::Forward(k) if seen[chain.stages[k].ops.start] => {
                let later = chain.views[k].iter().filter(|&&j| seen[j]);
                chain.reruns[k].iter().chain(later).copied().collect()
            }
            Action::Forward(k) => chain.stages[k].ops.clone().collect(),
            Action::Backward(k) => chain.groups[k].clone().collect(),
        };
        for i in ops {
            steps.push((OpId::new(i), std::mem::replace(&mut seen[i], true)));
        }
    }
    without_unread_views(ctx, chain, steps)
}

/// `steps` without the runs of later views ([`Chain::views`]) that run again before
/// anything reads them (their stage ran again before the stage that takes them did).
fn without_unread_views(ctx: &Context<'_>, chain: &Chain, steps: Steps) -> Steps {
    let g = ctx.g;
    let mut view = vec![false; ctx.n];
    for &j in chain.views.iter().flatten() {
        view[j] = true;
    }
    // Per op: it runs again later, and nothing reads its outputs before that.
    let mut remade = vec![false; ctx.n];
    let mut keep = vec![true; steps.len()];
    for (p, &(op, again)) in steps.iter().enumerate().rev() {
        let i = op.index();
        if again && view[i] && remade[i] {
            keep[p] = false;
            continue;
        }
        for &t in &g.op(op).inputs {
            if let Some(q) = g.producer(t) {
                remade[q.index()] = false;
            }
        }
        remade[i] = true;
    }
    steps
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}

/// Whether no recomputation in `steps` comes after the first run of an op that writes
/// state it reads ([`Context::dirty_at`], the verifier's rule). First runs follow the
/// traced order, so that op has run once any op at or after its position has.
fn safe(ctx: &Context<'_>, steps: &[(OpId, bool)]) -> bool {
    let mut reached = None;
    steps.iter().all(|&(op, again)| {
        let i = op.index();
        if !again {
            reached = reached.max(Some(i));
            return true;
        }
        let h = ctx.dirty_at[i];
        h == NO_HAZARD || reached.is_none_or(|r| r < h as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::load;

    /// The stages of tiny_mlp are its nine forward ops, and every backward op lands in
    /// exactly one group.
    #[test]
    fn tiny_mlp_is_a_chain_of_its_forward_ops() {
        let g = load("graphs/tiny_mlp.json");
        let ctx = Context::new(&g);
        let chain = chain_of(&ctx).unwrap();
        assert_eq!(
            chain.stages.len(),
            ctx.forward.iter().filter(|&&f| f).count()
        );
        let covered: usize = chain.groups.iter().map(|r| r.len()).sum();
        assert_eq!(covered, ctx.n - chain.stages.len());
    }
}
