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
//! (`fetch_after`: the last step that ends before it starts). A gap hides when its storage
//! is still away for at least one step on that clock.
//!
//! Greedily, while the memory model's peak is above the target, one gap at the peak step:
//! - first a gap that hides with those taken, within `--host-memory`, in one of two
//!   orders ([`Order`]: most compute time per byte between the touch and the reader first,
//!   or the latest reader first); each schedule is made to fit in both, the faster kept;
//! - when none does (the link is busy, or the peak's storages come back too soon), a
//!   *forced* gap: away at the peak step whatever its copies cost, the compute stream
//!   waiting for them. Forced first is the gap whose copies alone would stall least per
//!   byte; a gap already taken whose window misses the step can be forced over it too, and
//!   a gap whose copies the forced ones push past hiding is forced where it was taken. The
//!   three-stream replay prices the stalls; a forced plan wins only when it is faster.
//!
//! The arena and the host pool of the result are placed; if either is still above its
//! limit (alignment, fragmentation), the target drops below the peak the greedy reached by
//! the excess and the greedy runs again.
//!
//! **Kept, recomputed or offloaded, together** ([`best`]). Offloading costs link time
//! that overlap may hide, recomputing costs compute; which is cheaper depends on where in
//! the step the bytes are. So the schedules tried are recompute plans chosen at
//! [`LEVELS`] budgets above the plan's (from the same candidate set the budget selects
//! from: [`crate::budget`]'s for sublinear, the partition candidates for partition),
//! geometrically spaced up to the unplanned device bytes: less memory recomputed, more
//! offloaded, up to no recompute at all; then [`REFINE`] rounds of bisection on both sides
//! of the best. Each is made to fit by offloads, its step is replayed on three streams
//! ([`crate::offload::timeline`]), and the schedule with the least step time (compute,
//! recomputations included, plus the exposed copy time) wins; the plain recompute plan at
//! the budget (no copies) competes too.

use crate::budget::Chosen;
use crate::context::Context;
use crate::device;
use crate::error::{OffloadReach, PlanError};
use crate::offload;
use crate::options::PlanOptions;
use sgc_ir::{Offload, OpId, TensorId};
use sgc_plan_format::plan::Lifetime;
use sgc_plan_format::streams::{Direction, HostLink};

/// Recompute plans tried beneath the offloads: budgets above the plan's by 1/2^(LEVELS-1),
/// 1/2^(LEVELS-2), ..., 1/2, 1 of the way to the unplanned device bytes.
const LEVELS: u32 = 10;
/// Rounds of bisection around the best of the levels.
const REFINE: usize = 4;
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
/// budgets and [`REFINE`] rounds of bisection, made to fit by offloads, and the plain
/// recompute plan at the budget (see the module docs). When no schedule fits at all, the
/// refusal of the plain choice, with how close offloads came when it is a budget refusal.
fn best(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    choose: impl Fn(u64) -> Result<Chosen, PlanError>,
    budget: u64,
    link: &HostLink,
) -> Result<Fitted, PlanError> {
    let device = opts.device_profile.as_ref();
    // The best so far, or (none yet) the plain choice's refusal.
    let plain = choose(budget).and_then(|chosen| {
        let ops: Vec<OpId> = chosen.steps.iter().map(|s| s.0).collect();
        let step_us = offload::step_times(ctx.g, &ops, device)?.iter().sum();
        Ok(Fitted {
            chosen,
            offloads: Vec::new(),
            step_us,
        })
    });
    let top = unplanned_device(ctx, opts)?;
    let mut search = Levels {
        ctx,
        opts,
        choose,
        budget,
        link,
        best: plain,
        best_level: None,
        tried: Vec::new(),
        closest: None,
    };
    // Geometric: 1/2^(LEVELS-1) of the way to the top, then twice as far each time.
    let levels: Vec<u64> = (0..LEVELS)
        .map(|k| budget + (top.saturating_sub(budget) >> (LEVELS - 1 - k)))
        .collect();
    for &level in &levels {
        search.try_level(level)?;
    }
    // Around the best level, or above the budget when the plain plan is the best.
    let b = search.best_level.unwrap_or(budget);
    let k = levels.partition_point(|&l| l < b);
    let lo = k.checked_sub(1).map_or(budget, |j| levels[j]);
    let hi = levels[k..].iter().copied().find(|&l| l > b).unwrap_or(top);
    search.refine(lo, b, hi)?;
    match search.best {
        Err(PlanError::BudgetNotMet {
            budget,
            of,
            best_peak,
            best_device,
            lower_bound,
            bound,
            offload: None,
            retry,
        }) => Err(PlanError::BudgetNotMet {
            budget,
            of,
            best_peak,
            best_device,
            lower_bound,
            bound,
            offload: search.closest,
            retry,
        }),
        other => other,
    }
}

/// The search over recompute plans' budgets beneath the offloads, and the best so far.
struct Levels<'c, 'g, C> {
    ctx: &'c Context<'g>,
    opts: &'c PlanOptions,
    choose: C,
    budget: u64,
    link: &'c HostLink,
    best: Result<Fitted, PlanError>,
    /// The level the best came from (none: the plain plan, or nothing yet).
    best_level: Option<u64>,
    /// The schedules tried (two levels often choose the same).
    tried: Vec<Vec<(OpId, bool)>>,
    /// How close the schedules that did not fit came.
    closest: Option<OffloadReach>,
}

impl<C: Fn(u64) -> Result<Chosen, PlanError>> Levels<'_, '_, C> {
    /// Makes the recompute plan chosen at `level` fit the budget by offloads; `true` when
    /// it is the best so far.
    fn try_level(&mut self, level: u64) -> Result<bool, PlanError> {
        let Ok(base) = (self.choose)(level) else {
            return Ok(false);
        };
        if self.tried.contains(&base.steps) {
            return Ok(false);
        }
        self.tried.push(base.steps.clone());
        let f = match fit(self.ctx, self.opts, base, self.budget, self.link)? {
            Ok(f) => f,
            Err(reach) => {
                self.closest = Some(closer(self.closest, reach));
                return Ok(false);
            }
        };
        if self.best.as_ref().is_ok_and(|b| f.step_us >= b.step_us) {
            return Ok(false);
        }
        self.best = Ok(f);
        self.best_level = Some(level);
        Ok(true)
    }

    /// [`REFINE`] rounds of bisection on both sides of the best level `b`, between its
    /// neighbours `lo` and `hi`.
    fn refine(&mut self, mut lo: u64, mut b: u64, mut hi: u64) -> Result<(), PlanError> {
        for _ in 0..REFINE {
            let below = lo + b.saturating_sub(lo) / 2;
            if self.try_level(below)? {
                (hi, b) = (b, below);
            } else {
                lo = below;
            }
            let above = b + hi.saturating_sub(b) / 2;
            if self.try_level(above)? {
                (lo, b) = (b, above);
            } else {
                hi = above;
            }
        }
        Ok(())
    }
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

/// `base` made to fit `budget` device bytes by offloads (see the module docs), or how
/// close it came when the gaps or the rounds run out first.
fn fit(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    base: Chosen,
    budget: u64,
    link: &HostLink,
) -> Result<Result<Fitted, OffloadReach>, PlanError> {
    let g = ctx.g;
    let ops: Vec<OpId> = base.steps.iter().map(|s| s.0).collect();
    let times = offload::step_times(g, &ops, opts.device_profile.as_ref())?;
    let profile = sgc_ir::simulate(g, &ops).map_err(|e| internal(opts, e))?;
    let gaps = gaps(ctx, &ops);
    let ends: Vec<f64> = times
        .iter()
        .scan(0.0, |now, t| {
            *now += t;
            Some(*now)
        })
        .collect();
    let mut fitted: Option<(Vec<Offload>, f64)> = None;
    let mut closest: Option<OffloadReach> = None;
    for order in [Order::Slack, Order::LateReader] {
        let greedy = Greedy::new(&gaps, &ends, link, profile.resident.clone(), order);
        match fit_greedy(ctx, opts, greedy, &ops, budget, link)? {
            Ok((offloads, us)) => {
                if fitted.as_ref().is_none_or(|f| us < f.1) {
                    fitted = Some((offloads, us));
                }
            }
            Err(r) => closest = Some(closer(closest, r)),
        }
    }
    Ok(match (fitted, closest) {
        (Some((offloads, step_us)), _) => Ok(Fitted {
            chosen: base,
            offloads,
            step_us,
        }),
        (None, Some(r)) => Err(r),
        (None, None) => unreachable!("each order fits or misses"),
    })
}

/// The closer of two misses: the lowest device bytes placed, else the lowest peak.
fn closer(a: Option<OffloadReach>, b: OffloadReach) -> OffloadReach {
    let key = |r: &OffloadReach| (r.device.is_none(), r.device.unwrap_or(r.peak), r.peak);
    match a {
        Some(a) if key(&a) <= key(&b) => a,
        _ => b,
    }
}

/// One greedy's offloads for `ops` within `budget` and their step time (see the module
/// docs), or how close it came.
fn fit_greedy(
    ctx: &Context<'_>,
    opts: &PlanOptions,
    mut greedy: Greedy<'_>,
    ops: &[OpId],
    budget: u64,
    link: &HostLink,
) -> Result<Result<(Vec<Offload>, f64), OffloadReach>, PlanError> {
    let g = ctx.g;
    let mut target = budget.saturating_sub(ctx.persistent_bytes);
    let mut host_limit = opts.host_memory;
    let mut closest: Option<OffloadReach> = None;
    for _ in 0..PLACE_ROUNDS {
        greedy.restart(host_limit);
        let lowered = greedy.lower_to(target);
        let reached = greedy.resident.iter().copied().max().unwrap_or(0);
        let peak = reached.saturating_add(ctx.persistent_bytes);
        if !lowered {
            return Ok(Err(closest.unwrap_or(OffloadReach { device: None, peak })));
        }
        let offloads = greedy.offloads();
        let placed = placed_device(ctx, opts, ops, &offloads)?;
        closest = Some(closer(
            closest,
            OffloadReach {
                device: Some(placed),
                peak,
            },
        ));
        let pool = offload::host_layout(g, &offloads)?.size;
        let pool_over = opts.host_memory.map_or(0, |l| pool.saturating_sub(l));
        if placed <= budget && pool_over == 0 {
            let t = offload::timeline(g, ops, &offloads, opts.device_profile.as_ref(), link)?;
            return Ok(Ok((offloads, t.total_us)));
        }
        target = target
            .min(reached)
            .saturating_sub(placed.saturating_sub(budget));
        host_limit = host_limit.map(|l| l.saturating_sub(pool_over));
    }
    Ok(Err(closest.expect("one round placed")))
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

/// The order in which the greedy tries the gaps that may hide; [`fit`] runs both and keeps
/// the faster plan.
#[derive(Clone, Copy)]
enum Order {
    /// Most compute time per byte between the touch and the reader first: a long gap
    /// around a small storage leaves the link for others.
    Slack,
    /// The latest reader first (then the largest): its copy back has the most of the
    /// backward to hide under.
    LateReader,
}

/// The greedy's state: the schedule's clock, the gaps, which are taken, and the resident
/// and host bytes per step that the taken ones give.
struct Greedy<'a> {
    link: &'a HostLink,
    /// `ends[s]`: when step `s` ends on an unstalled compute stream, µs.
    ends: &'a [f64],
    gaps: &'a [Gap],
    /// Gap indices in the [`Order`] tried.
    by_order: Vec<usize>,
    base: Vec<u64>,
    resident: Vec<u64>,
    host: Vec<u64>,
    taken: Vec<usize>,
    /// For each taken gap, in `taken`'s order: the steps it was taken to lower (first,
    /// last), and whether it is away through them whatever its copies cost (taken, or
    /// pushed, past hiding).
    at: Vec<(usize, usize)>,
    forced: Vec<bool>,
    /// Gaps whose copies no longer hide beside those taken (more copies only delay them).
    dead: Vec<bool>,
    /// The window of each taken gap, in `taken`'s order.
    windows: Vec<Window>,
    host_limit: Option<u64>,
}

impl<'a> Greedy<'a> {
    fn new(
        gaps: &'a [Gap],
        ends: &'a [f64],
        link: &'a HostLink,
        resident: Vec<u64>,
        order: Order,
    ) -> Self {
        let n_gaps = gaps.len();
        let mut by_order: Vec<usize> = (0..n_gaps).collect();
        match order {
            Order::Slack => {
                let slack: Vec<f64> = gaps
                    .iter()
                    .map(|g| (ends[g.v - 1] - ends[g.u]) / g.bytes.max(1) as f64)
                    .collect();
                by_order.sort_by(|&a, &b| slack[b].total_cmp(&slack[a]).then(a.cmp(&b)));
            }
            Order::LateReader => by_order.sort_by_key(|&i| {
                let gap = &gaps[i];
                (std::cmp::Reverse(gap.v), std::cmp::Reverse(gap.bytes), i)
            }),
        }
        Greedy {
            link,
            ends,
            gaps,
            by_order,
            host: vec![0; resident.len()],
            base: resident.clone(),
            resident,
            taken: Vec::new(),
            at: Vec::new(),
            forced: Vec::new(),
            dead: vec![false; n_gaps],
            windows: Vec::new(),
            host_limit: None,
        }
    }

    /// Back to no gap taken, under a host limit.
    fn restart(&mut self, host_limit: Option<u64>) {
        self.host_limit = host_limit;
        self.taken.clear();
        self.at.clear();
        self.forced.clear();
        self.dead.iter_mut().for_each(|d| *d = false);
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

    /// Takes the first gap (in the greedy's [`Order`]) whose offload, with the copies of
    /// those taken, still hides under compute and saves bytes at `step`. When none does,
    /// the gap around `step` whose copies alone would stall compute least per byte, forced:
    /// away at `step` whatever its copies cost, and so is any taken gap that its copies
    /// push past hiding (the three-stream replay prices the stalls). A taken gap whose
    /// window misses `step` can be forced to cover it too.
    fn take_at(&mut self, step: usize) -> bool {
        let spans = |gap: &Gap| gap.u + 1 < step && step < gap.v;
        for k in 0..self.by_order.len() {
            let i = self.by_order[k];
            let hidden = spans(&self.gaps[i]) && !self.dead[i];
            if hidden && self.admissible(i) && self.try_take(i, step, false) {
                return true;
            }
        }
        // Forced: the gaps around `step` by the stall their copies would add per byte.
        let mut forced: Vec<(f64, usize)> = (0..self.gaps.len())
            .filter(|&i| spans(&self.gaps[i]))
            .map(|i| (self.stall_per_byte(i, step), i))
            .collect();
        forced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, i) in forced {
            let tried = match self.taken.iter().position(|&j| j == i) {
                None => self.admissible(i) && self.try_take(i, step, true),
                Some(t) => !saves(&self.windows, t, step) && self.try_widen(t, step),
            };
            if tried {
                return true;
            }
        }
        false
    }

    /// What gap `i`'s copies, away at `step`, would stall compute per byte saved, by
    /// themselves: the copy to host must end before `step`, the copy back start after it.
    fn stall_per_byte(&self, i: usize, step: usize) -> f64 {
        let gap = &self.gaps[i];
        let out = self.link.copy_us(Direction::ToHost, gap.bytes)
            - (self.ends[step - 1] - self.ends[gap.u]);
        let back = self.link.copy_us(Direction::ToDevice, gap.bytes)
            - (self.ends[gap.v - 1] - self.ends[step]);
        (out.max(0.0) + back.max(0.0)) / gap.bytes.max(1) as f64
    }

    /// Takes gap `i` to lower `step`, forced when `lenient`, if its windows allow it.
    fn try_take(&mut self, i: usize, step: usize, lenient: bool) -> bool {
        self.taken.push(i);
        self.at.push((step, step));
        self.forced.push(lenient);
        if self.try_windows(self.taken.len() - 1, step, lenient) {
            return true;
        }
        self.taken.pop();
        self.at.pop();
        self.forced.pop();
        false
    }

    /// Forces taken gap `t`, whose window misses `step`, to be away there too.
    fn try_widen(&mut self, t: usize, step: usize) -> bool {
        let old = (self.at[t], self.forced[t]);
        self.at[t] = (old.0 .0.min(step), old.0 .1.max(step));
        self.forced[t] = true;
        if self.try_windows(t, step, true) {
            return true;
        }
        (self.at[t], self.forced[t]) = old;
        false
    }

    /// Lays the windows out again; keeps them when taken gap `t` then saves at `step`.
    fn try_windows(&mut self, t: usize, step: usize, lenient: bool) -> bool {
        match self.windows_of(lenient) {
            Some((w, forced)) if saves(&w, t, step) => {
                self.windows = w;
                self.forced = forced;
                self.recount();
                true
            }
            Some(_) => false,
            None => {
                self.dead[self.taken[t]] = true;
                false
            }
        }
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
    /// when some copy does not fit in its gap, unless `lenient`: then that gap is forced
    /// too. A forced gap is away at its step whatever the clock says: freed before it,
    /// fetched after it. The second value: which gaps are forced.
    fn windows_of(&self, lenient: bool) -> Option<(Vec<Window>, Vec<bool>)> {
        let mut forced = self.forced.clone();
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
            out[k].0 = if forced[k] {
                f.min(self.at[k].0 - 1)
            } else {
                f
            };
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
                .checked_sub(1);
            let hides = p.is_some_and(|p| p > out[k].0);
            if !forced[k] && !hides {
                if !lenient {
                    return None;
                }
                forced[k] = true;
                out[k].0 = out[k].0.min(self.at[k].0 - 1);
            }
            out[k].1 = match p {
                Some(p) if forced[k] => p.max(self.at[k].1),
                Some(p) => p,
                None => self.at[k].1,
            };
        }
        Some((out, forced))
    }

    /// Resident and host bytes again from the base and the taken gaps' windows (each
    /// window a +/- pair on a difference array, summed once).
    fn recount(&mut self) {
        let n = self.base.len();
        let mut away = vec![0i128; n + 1];
        let mut host = vec![0i128; n + 1];
        for (&i, &(f, p)) in self.taken.iter().zip(&self.windows) {
            let gap = &self.gaps[i];
            let b = i128::from(gap.bytes);
            away[f + 1] += b;
            away[p + 1] -= b;
            host[gap.u + 1] += b;
            host[gap.v + 1] -= b;
        }
        let (mut a, mut h) = (0i128, 0i128);
        for s in 0..n {
            a += away[s];
            h += host[s];
            // Both sums are of bytes held at step `s`, so within u64 and within the base.
            self.resident[s] = self.base[s] - a as u64;
            self.host[s] = h as u64;
        }
    }
}

/// A taken gap's (free_after, fetch_after).
type Window = (usize, usize);

/// Whether window `k` of `windows` frees its storage at `step`.
fn saves(windows: &[Window], k: usize, step: usize) -> bool {
    let (f, p) = windows[k];
    f < step && step <= p
}
