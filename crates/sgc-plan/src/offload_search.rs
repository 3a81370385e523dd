//! Choosing what to offload: each activation is kept, recomputed or offloaded, under a
//! budget in device bytes, for the least predicted step time.
//!
//! **One schedule, made to fit by offloads** ([`fit`]). Given a schedule (a recompute plan,
//! or the traced order) whose device bytes are above the budget, every gap in a storage's
//! use is a candidate: between two consecutive steps that touch it, `u` and a reader `v`,
//! it can go to host after `u` and come back before `v`. Where in the gap it is away
//! depends on the link and on the other copies, so the copies of the gaps taken are laid
//! out on the schedule's own clock (each step's time, no stalls): the copies to host in
//! the order of their `u`, each as soon as its stream is free (the storage is freed after
//! the first step that ends once its copy has, `free_after`), the copies back in the order
//! of their `v` from the last, each as late as its reader and the copy behind it allow
//! (`fetch_after`: the last step that ends before it starts). A set of gaps fits when
//! every storage is still away for at least one step; then its copies hide under compute.
//! Greedily, while the memory model's peak is above the target: take the largest gap
//! around the peak step whose storage, with the copies of those taken, is still away at
//! that step and whose host bytes keep within `--host-memory`. The arena and the host pool
//! of the result are placed; if either is still above its limit (alignment, fragmentation),
//! that limit drops by the excess and the greedy runs again.
//!
//! **Kept, recomputed or offloaded, together** ([`best`]). Offloading costs link time
//! that overlap may hide, recomputing costs compute; which is cheaper depends on where in
//! the step the bytes are. So the schedules tried are recompute plans chosen at
//! [`LEVELS`] budgets above the plan's (from the same candidate set the budget selects
//! from: [`crate::budget`]'s for sublinear, the partition candidates for partition), geometrically spaced up to the unplanned device bytes: less
//! memory recomputed, more offloaded, up to no recompute at all. Each is made to fit by
//! offloads, its step is replayed on three streams ([`crate::offload::timeline`]), and the
//! schedule with the least step time (compute, recomputations included, plus the exposed
//! copy time) wins; the plain recompute plan at the budget (no copies) competes too.

use crate::budget::Chosen;
use crate::context::Context;
use crate::device;
use crate::error::PlanError;
use crate::offload;
use crate::options::PlanOptions;
use crate::plan::Lifetime;
use crate::streams::{Direction, HostLink};
use sgc_ir::{Offload, OpId, TensorId};

/// Recompute plans tried beneath the offloads: budgets above the plan's by 1/2^(LEVELS-1),
/// 1/2^(LEVELS-2), ..., 1/2, 1 of the way to the unplanned device bytes.
const LEVELS: u32 = 10;
/// Rounds of "place the arena, lower the target by the excess".
const PLACE_ROUNDS: usize = 6;

/// A schedule with offloads, and what it gives.
struct Fitted {
    pub chosen: Chosen,
    pub offloads: Vec<Offload>,
    /// Predicted step time (compute plus exposed copies), µs.
    pub step_us: f64,
}

/// The fastest schedule within `budget` device bytes among recompute plans at [`LEVELS`]
/// budgets made to fit by offloads, and the plain recompute plan at the budget (see the
/// module docs). When no schedule fits at all, the refusal of the plain choice.
fn best(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    choose: impl Fn(u64) -> Result<Chosen, PlanError>,
    budget: u64,
    link: &HostLink,
) -> Result<Fitted, PlanError> {
    let device = opts.device_profile.as_ref();
    // The best so far, or (none yet) the plain choice's refusal.
    let mut best = choose(budget).and_then(|chosen| {
        let ops: Vec<OpId> = chosen.steps.iter().map(|s| s.0).collect();
        let step_us = offload::step_times(ctx.g, &ops, device)?.iter().sum();
        Ok(Fitted {
            chosen,
            offloads: Vec::new(),
            step_us,
        })
    });
    let top = unplanned_device(ctx, opts)?;
    let mut tried: Vec<Vec<(OpId, bool)>> = Vec::new();
    for k in 0..LEVELS {
        // Geometric: 1/2^(LEVELS-1) of the way to the top, then twice as far each time.
        let level = budget + (top.saturating_sub(budget) >> (LEVELS - 1 - k));
        let Ok(base) = choose(level) else {
            continue;
        };
        if tried.contains(&base.steps) {
            continue;
        }
        tried.push(base.steps.clone());
        let Some(f) = fit(ctx, opts, base, budget, link)? else {
            continue;
        };
        if best.as_ref().map_or(true, |b| f.step_us < b.step_us) {
            best = Ok(f);
        }
    }
    best
}

/// The plan a budget selects with `choose`, made with offloads when the options have a host
/// link ([`best`]), else `choose(budget)` as it is.
pub(crate) fn choose_with_offloads(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    choose: impl Fn(u64) -> Result<Chosen, PlanError>,
    budget: u64,
) -> Result<(Chosen, Vec<Offload>), PlanError> {
    match opts.host_link.as_ref() {
        Some(link) => best(ctx, opts, &choose, budget, link).map(|f| (f.chosen, f.offloads)),
        None => Ok((choose(budget)?, Vec::new())),
    }
}

/// The device bytes of the traced order (the top of the levels).
fn unplanned_device(ctx: &Context<'_>, opts: &PlanOptions) -> Result<u64, PlanError> {
    let steps: Vec<(OpId, bool)> = ctx.g.op_ids().map(|o| (o, false)).collect();
    device::device_bytes(ctx, opts, &steps)
}

/// A gap in one storage's use that an offload can fill: touched at `u`, read next at `v`.
#[derive(Clone, Copy, Debug)]
struct Gap {
    root: TensorId,
    u: usize,
    v: usize,
    bytes: u64,
}

/// `base` made to fit `budget` device bytes by offloads (see the module docs), or `None`
/// when the gaps run out first.
fn fit(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    base: Chosen,
    budget: u64,
    link: &HostLink,
) -> Result<Option<Fitted>, PlanError> {
    let g = ctx.g;
    let ops: Vec<OpId> = base.steps.iter().map(|s| s.0).collect();
    let times = offload::step_times(g, &ops, opts.device_profile.as_ref())?;
    let profile = sgc_ir::simulate(g, &ops).map_err(|e| internal(opts, e))?;
    let mut target = budget.saturating_sub(ctx.persistent_bytes);
    let mut host_limit = opts.host_memory;
    let mut greedy = Greedy::new(ctx, &ops, &times, link, profile.resident);
    for _ in 0..PLACE_ROUNDS {
        greedy.restart(host_limit);
        if !greedy.lower_to(target) {
            return Ok(None);
        }
        let offloads = greedy.offloads();
        let placed = placed_device(ctx, opts, &ops, &offloads)?;
        let pool = offload::host_layout(g, &offloads)?.size;
        let pool_over = opts.host_memory.map_or(0, |l| pool.saturating_sub(l));
        if placed <= budget && pool_over == 0 {
            let t = offload::timeline(g, &ops, &offloads, opts.device_profile.as_ref(), link)?;
            return Ok(Some(Fitted {
                chosen: base,
                offloads,
                step_us: t.total_us,
            }));
        }
        target = target.saturating_sub(placed.saturating_sub(budget));
        host_limit = host_limit.map(|l| l.saturating_sub(pool_over));
    }
    Ok(None)
}

fn internal(opts: &PlanOptions, e: impl std::fmt::Display) -> PlanError {
    PlanError::Internal {
        strategy: opts.strategy.to_string(),
        message: e.to_string(),
    }
}

/// Device bytes of a schedule with offloads: its arena placed, plus persistent bytes.
fn placed_device(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    ops: &[OpId],
    offloads: &[Offload],
) -> Result<u64, PlanError> {
    let profile =
        sgc_ir::simulate_offloaded(ctx.g, ops, offloads).map_err(|e| internal(opts, e))?;
    let lifetimes: Vec<Lifetime> = profile.instances.iter().map(Lifetime::from).collect();
    let layout = device::place(ctx.g, ops, &lifetimes, opts)?;
    Ok(layout.size.saturating_add(ctx.persistent_bytes))
}

/// Every gap of every storage in the schedule long enough for an offload (two steps
/// between the touch and the read at least: the one after which it is freed and the one
/// after which it is fetched back).
fn gaps(ctx: &Context<'_>, ops: &[OpId]) -> Vec<Gap> {
    let g = ctx.g;
    let mut last: Vec<Option<usize>> = vec![None; g.num_tensors()];
    let mut out = Vec::new();
    for (s, &op) in ops.iter().enumerate() {
        let (reads, writes) = (&ctx.in_roots[op.index()], &ctx.out_roots[op.index()]);
        for &r in reads {
            if let Some(u) = last[r.index()].filter(|&u| s >= u + 3) {
                out.push(Gap {
                    root: r,
                    u,
                    v: s,
                    bytes: g.tensor(r).size,
                });
            }
        }
        for &r in reads.iter().chain(writes) {
            last[r.index()] = Some(s);
        }
    }
    out
}

/// The greedy's state: the schedule's clock, the gaps, which are taken, and the resident
/// and host bytes per step that the taken ones give.
struct Greedy<'a> {
    link: &'a HostLink,
    /// `ends[s]`: when step `s` ends on an unstalled compute stream, µs.
    ends: Vec<f64>,
    gaps: Vec<Gap>,
    /// Gap indices, largest first (then earliest).
    by_size: Vec<usize>,
    base: Vec<u64>,
    resident: Vec<u64>,
    host: Vec<u64>,
    taken: Vec<usize>,
    /// The (free_after, fetch_after) of each taken gap, in `taken`'s order.
    windows: Vec<(usize, usize)>,
    host_limit: Option<u64>,
}

impl<'a> Greedy<'a> {
    fn new(
        ctx: &Context<'a>,
        ops: &[OpId],
        times: &[f64],
        link: &'a HostLink,
        resident: Vec<u64>,
    ) -> Self {
        let mut ends = Vec::with_capacity(times.len());
        let mut now = 0.0;
        for &t in times {
            now += t;
            ends.push(now);
        }
        let gaps = gaps(ctx, ops);
        let mut by_size: Vec<usize> = (0..gaps.len()).collect();
        by_size.sort_by_key(|&i| (std::cmp::Reverse(gaps[i].bytes), i));
        Greedy {
            link,
            ends,
            gaps,
            by_size,
            host: vec![0; resident.len()],
            base: resident.clone(),
            resident,
            taken: Vec::new(),
            windows: Vec::new(),
            host_limit: None,
        }
    }

    /// Back to no gap taken, under a host limit.
    fn restart(&mut self, host_limit: Option<u64>) {
        self.host_limit = host_limit;
        self.taken.clear();
        self.windows.clear();
        self.recount();
    }

    /// The taken gaps as offloads.
    fn offloads(&self) -> Vec<Offload> {
        self.taken
            .iter()
            .zip(&self.windows)
            .map(|(&i, &(f, p))| {
                let gap = &self.gaps[i];
                Offload {
                    root: gap.root,
                    copy_after: gap.u,
                    free_after: f,
                    fetch_after: p,
                    needed_at: gap.v,
                }
            })
            .collect()
    }

    /// Takes gaps until no step's resident bytes exceed `target`; `false` when no gap
    /// lowers the peak step any more.
    fn lower_to(&mut self, target: u64) -> bool {
        loop {
            let Some((peak_step, &peak)) = self
                .resident
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            else {
                return true;
            };
            if peak <= target {
                return true;
            }
            if !self.take_at(peak_step) {
                return false;
            }
        }
    }

    /// Takes the largest gap whose offload, with the copies of those taken, still hides
    /// under compute and saves bytes at `step`.
    fn take_at(&mut self, step: usize) -> bool {
        for k in 0..self.by_size.len() {
            let i = self.by_size[k];
            let gap = self.gaps[i];
            if !(gap.u + 1 < step && step < gap.v && self.admissible(i)) {
                continue;
            }
            self.taken.push(i);
            match self.windows_of() {
                Some(w) if saves(&w, self.taken.len() - 1, step) => {
                    self.windows = w;
                    self.recount();
                    return true;
                }
                _ => {
                    self.taken.pop();
                }
            }
        }
        false
    }

    /// Not taken, no overlap with a taken gap of the same storage, within the host limit.
    fn admissible(&self, i: usize) -> bool {
        let gap = &self.gaps[i];
        let clash = self.taken.iter().any(|&j| {
            let t = &self.gaps[j];
            j == i || (t.root == gap.root && t.u < gap.v && gap.u < t.v)
        });
        let host_fits = self.host_limit.is_none_or(|limit| {
            self.host[gap.u + 1..=gap.v]
                .iter()
                .all(|&b| b.saturating_add(gap.bytes) <= limit)
        });
        !clash && host_fits
    }

    /// Every taken gap's (free_after, fetch_after) when the copies to host run in the order
    /// of their `u`, each as early as its stream allows, and the copies back in the order
    /// of their `v`, each as late as its reader allows (on the unstalled clock); `None`
    /// when some copy does not fit in its gap.
    fn windows_of(&self) -> Option<Vec<(usize, usize)>> {
        let n = self.taken.len();
        let mut out = vec![(0, 0); n];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&k| (self.gaps[self.taken[k]].u, self.taken[k]));
        let mut free_at = 0.0;
        for &k in &order {
            let gap = &self.gaps[self.taken[k]];
            let start = f64::max(free_at, self.ends[gap.u]);
            free_at = start + self.link.copy_us(Direction::ToHost, gap.bytes);
            // The first step f > u that ends once the copy has.
            let f = (self.ends.partition_point(|&e| e < free_at)).max(gap.u + 1);
            out[k].0 = f;
        }
        order.sort_by_key(|&k| (std::cmp::Reverse(self.gaps[self.taken[k]].v), self.taken[k]));
        let mut next_start = f64::INFINITY;
        for &k in &order {
            let gap = &self.gaps[self.taken[k]];
            let reader_starts = self.ends[gap.v - 1];
            let end = f64::min(next_start, reader_starts);
            let start = end - self.link.copy_us(Direction::ToDevice, gap.bytes);
            next_start = start;
            // The last step p < v that has ended when the copy must start.
            let p = self.ends[..gap.v]
                .partition_point(|&e| e <= start)
                .checked_sub(1)?;
            if p <= out[k].0 {
                return None;
            }
            out[k].1 = p;
        }
        Some(out)
    }

    /// Resident and host bytes again from the base and the taken gaps' windows.
    fn recount(&mut self) {
        self.resident.clone_from(&self.base);
        self.host.iter_mut().for_each(|b| *b = 0);
        for (&i, &(f, p)) in self.taken.iter().zip(&self.windows) {
            let gap = &self.gaps[i];
            for r in &mut self.resident[f + 1..=p] {
                *r -= gap.bytes;
            }
            for h in &mut self.host[gap.u + 1..=gap.v] {
                *h += gap.bytes;
            }
        }
    }
}

/// Whether window `k` of `windows` frees its storage at `step`.
fn saves(windows: &[(usize, usize)], k: usize, step: usize) -> bool {
    let (f, p) = windows[k];
    f < step && step <= p
}
