//! The `partition` strategy: the forward runs once, a set of its tensors is kept for the
//! backward, and every other forward tensor the backward reads is recomputed there, right
//! before its first backward use, from what was kept (each forward op at most once). This
//! is the shape of `torch.compile`'s joint-graph partition, so `sgc_trace` applies such a
//! plan as it is; the set is what this module chooses.
//!
//! **The trade-off as a minimum cut.** For weights `a` (per byte kept) and `b` (per unit of
//! recompute cost), the set minimising `a * bytes kept + b * recompute cost` is a minimum
//! cut of this network (source: "made in the forward"; sink: "read by the backward"):
//! - each forward storage `t` (a tensor and its views, which keep it alive and are remade
//!   from it for free) is two nodes, `t_in -> t_out` with capacity `a * bytes(t)`: the
//!   cut crosses it when `t` is made in the forward and kept (`t_in` on the source side,
//!   `t_out` on the sink side);
//! - each forward op `p` is a node with `source -> p` of capacity `b * cost(p)` (unbounded
//!   when `p` may not run again: random, stateful, or reading state written in place before
//!   the backward could need it): `p` on the sink side runs again in the backward;
//! - `p -> t_in` (unbounded) for each output: an output needed in the backward and not kept
//!   puts its producer on the sink side; `u_out -> p` (unbounded) for each input: a
//!   recomputed op needs its inputs in the backward, kept or recomputed in turn;
//! - `t_out -> sink` (unbounded) for every forward tensor a backward op reads; graph
//!   inputs cannot be recomputed (`source -> t_in` unbounded).
//!
//! PyTorch's min-cut partitioner solves this network with recompute priced by banning
//! (an op is free to recompute or forbidden) and its memory budget with a knapsack that
//! prices each tensor on its own; here both terms are priced, with the cost model's
//! per-op times, and the recomputation a kept tensor saves upstream is counted exactly.
//!
//! **Every budget.** One cut gives one point of the bytes/recompute trade-off. The
//! vertices of its lower convex hull come from Eisner-Severance's parametric search: the
//! cuts that minimise bytes first and recompute first are the two ends; the weights at
//! which two known vertices tie, `a = cost(A) - cost(B)`, `b = bytes(B) - bytes(A)`, give
//! a cut that is either on their line (no vertex between them) or a new vertex, searched
//! on both sides. A vertex recomputes the least possible for the bytes it keeps, and so
//! does every other minimum cut at a segment's tie weights (they lie on the segment; they
//! form a chain from one vertex to the other, the closed sets of the residual graph,
//! [`Network::min_cut_chain`]). A budget between two vertices is served by kept sets off
//! the hull, which are heuristic: from each vertex, tensors kept one more at a time (the
//! most recompute saved per byte) and one fewer at a time (the least recompute added per
//! byte freed); the minimum cuts at each segment's weights on copies of the network
//! whose prices are jittered by a fixed pseudo-random factor per node; the fronts of
//! Pareto walks from each vertex ([`Model::pareto`]: every set reached by adding, or
//! dropping, one tensor at a time that no other set reached matches in both bytes and
//! recompute, so the steps between two vertices are as fine as the tensors' sizes, where a
//! greedy walk takes one large tensor per step); and one swap (a kept tensor for a
//! recomputed one) from every member of the resulting front ([`Model::swaps`]). Of the
//! walks' and swaps' sets, those on the lower front of every set's model figures become
//! candidates (thinned to the ones recomputing at least 2^-12 less than the one before).
//! Measured against `torch.compile`'s partitioner at its own saved bytes (`just vs-torch`),
//! sgc recomputes no more at all 54 budgets where PyTorch's answer is a valid step; on
//! `tiny_cnn`, checked against every subset by a test, the candidates reach the least
//! recompute possible at 55 of 56 budgets.
//!
//! Every kept set becomes a schedule ([`crate::schedule::State`], the engine static DTR
//! uses: originals in traced order, the forward tensors not kept released when the
//! backward starts, a missing input recomputed with its missing ancestors and kept for
//! every later reader) and is measured on the schedule itself: bytes kept
//! ([`sgc_plan_format::plan::saved_bytes`]), recompute cost and peak. The candidate set does not
//! depend on the budget, and a budget selects the candidate that recomputes least within
//! it, so a larger budget never costs more.

use crate::context::{Context, Validity, NO_HAZARD};
use crate::maxflow::{Cap, Network};
use crate::schedule::{Infeasible, Policy, State};
use rayon::prelude::*;
use sgc_ir::{OpId, Phase, TensorId};

/// The most minimum cuts the parametric search solves (each hull vertex costs about two).
const MAX_CUTS: usize = 160;
/// The most minimum cuts taken from one hull segment.
const CHAIN_POINTS: usize = 48;
/// Tensors one greedy step tries ([`Model::greedy`]).
const GREEDY_TRIES: usize = 48;
/// Greedy steps from one hull vertex: enough to cross a wide gap between two vertices
/// (one very large tensor, as a language model's log-softmax output, makes one; fewer
/// steps stop short of it, and a budget in the gap then recomputes far too much).
const GREEDY_STEPS: usize = 64;
/// Members of a Pareto walk's front expanded, from one hull vertex ([`Model::pareto`]).
const PARETO_EXPANSIONS: usize = 64;
/// Tensors added (or dropped) from one member of a Pareto walk's front.
const PARETO_TRIES: usize = 24;
/// The swap pass starts from the front members that recompute at least 2^-12 less than the
/// one before them ([`thin`]): a 1300-op graph's front holds 20k members otherwise, most a
/// few bytes and units apart, and the pass tries 64 swaps on each.
const SWAP_FRONT: u32 = 12;
/// The walks' and swaps' sets on the front become candidates (a schedule each) when they
/// recompute at least 2^-12 less than the one before them ([`thin`]): fine enough that a
/// budget between two candidates loses next to nothing to a finer front.
const MAX_FOUND: u32 = 12;
/// Tensors dropped and tensors added per front member in the swap pass ([`Model::swaps`]).
const SWAP_TRIES: usize = 8;
/// Copies of the network with jittered prices ([`Model::jittered`]).
const JITTER_COPIES: u64 = 16;
/// How far a jittered price may be off (a fraction).
const JITTER: f64 = 0.5;

/// A fixed pseudo-random 64-bit value of `x` (splitmix64's finaliser).
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One candidate schedule and what it was measured at.
pub(crate) struct Candidate {
    pub steps: Vec<(OpId, bool)>,
    /// Bytes kept for the backward.
    pub saved: u64,
    /// Recompute cost in the context's units.
    pub units: u64,
    /// Memory-model peak.
    pub peak: u64,
}

/// Why the graph has no partition plans.
#[derive(Debug)]
pub(crate) enum Unpartitionable {
    /// No op is marked (or inferred) backward.
    NoBackward,
    /// No kept set gives a schedule that can run.
    NoSchedule,
}

/// Every candidate of the graph (see the module doc), by increasing bytes kept.
pub(crate) fn candidates(
    ctx: &Context<'_>,
    pool: &rayon::ThreadPool,
) -> Result<Vec<Candidate>, Unpartitionable> {
    let b0 = (0..ctx.n)
        .find(|&i| ctx.g.phase(OpId::new(i)) == Some(Phase::Backward))
        .ok_or(Unpartitionable::NoBackward)?;
    let mut cands = Vec::new();
    for strict in [false, true] {
        let model = Model::new(ctx, b0, strict);
        let sets = pool.install(|| model.kept_sets());
        let built: Vec<Option<Candidate>> = pool.install(|| {
            sets.par_iter()
                .map(|s| model.candidate(ctx, s).ok())
                .collect()
        });
        cands = built.into_iter().flatten().collect();
        if !cands.is_empty() {
            break;
        }
    }
    if cands.is_empty() {
        return Err(Unpartitionable::NoSchedule);
    }
    cands.sort_by_key(|c| (c.saved, c.units, c.peak));
    cands.dedup_by(|a, b| a.steps == b.steps);
    Ok(cands)
}

/// The network of one graph and the facts to read a cut back.
struct Model {
    net: Network,
    /// Position of the first backward op.
    b0: usize,
    /// Forward storages (roots) with a node pair, in order of first use; pair `k` is nodes
    /// `2 + 2k`, `3 + 2k`.
    tensors: Vec<TensorId>,
    /// Per tensor of `tensors`: the bytes keeping it costs (its storage's).
    bytes: Vec<u64>,
    /// The tensors of `tensors` read by an op at or after the backward's start, in order.
    needed_list: Vec<u32>,
    /// Per tensor of `tensors`: its producer's op node (`None`: it cannot be recomputed).
    producer: Vec<Option<usize>>,
    /// Per forward op `j` (node `first_op + j`): its cost units.
    ops: Vec<u64>,
    first_op: usize,
    /// Per op node: the pair indices of its inputs that have pairs.
    op_inputs: Vec<Vec<u32>>,
}

const SOURCE: usize = 0;
const SINK: usize = 1;

/// Buffers of [`Model::closure`]: per tensor and per op, the stamp of the last walk that
/// reached it (so a walk starts without clearing them), and the walk's stack.
#[derive(Default)]
struct ClosureScratch {
    stamp: u32,
    seen: Vec<u32>,
    ran: Vec<u32>,
    stack: Vec<u32>,
}

impl ClosureScratch {
    /// A new stamp, with buffers for `tensors` tensors and `ops` ops.
    fn begin(&mut self, tensors: usize, ops: usize) {
        if self.stamp == u32::MAX {
            self.seen.clear();
            self.ran.clear();
            self.stamp = 0;
        }
        self.stamp += 1;
        if self.seen.len() < tensors {
            self.seen.resize(tensors, 0);
        }
        if self.ran.len() < ops {
            self.ran.resize(ops, 0);
        }
    }
}

thread_local! {
    static CLOSURE: std::cell::RefCell<ClosureScratch> = std::cell::RefCell::default();
}

/// Which way a Pareto walk ([`Model::pareto`]) goes from its hull vertex.
#[derive(Clone, Copy)]
enum Direction {
    /// Keeps one more tensor at a time.
    Add,
    /// Keeps one fewer tensor at a time.
    Drop,
}

/// A member of a Pareto walk's front: a kept set (as a mask) and its model figures.
struct Point {
    bytes: u64,
    units: u64,
    mask: Vec<bool>,
    expanded: bool,
}

/// A kept set one swap from a front member ([`Model::swaps`]): what it drops and adds, and
/// its model figures.
#[derive(Clone, Copy)]
struct SwapPoint {
    bytes: u64,
    units: u64,
    drop: u32,
    add: u32,
}

/// A swap and the front member it was made from.
type Swap = (Member, SwapPoint);

/// A kept set of [`Model::kept_sets`] by where it is: built by the other generators
/// (index into the sets), or found by a walk or the swap pass (index into their list).
#[derive(Clone, Copy)]
enum Member {
    Set(usize),
    Walked(usize),
}

/// The members on the lower front of (bytes, units): sorted by bytes, each recomputing
/// strictly less than every member before it. `known` are the built sets' figures,
/// `found` the walks' (and swaps'); ties go to the built sets.
fn lower_front(known: &[(u64, u64)], found: impl Iterator<Item = (u64, u64)>) -> Vec<Member> {
    let mut all: Vec<(u64, u64, u8, usize)> = known
        .iter()
        .enumerate()
        .map(|(i, &(b, u))| (b, u, 0, i))
        .chain(found.enumerate().map(|(i, (b, u))| (b, u, 1, i)))
        .collect();
    all.sort_unstable();
    let mut least = u64::MAX;
    let mut out = Vec::new();
    for (_, units, kind, i) in all {
        if units < least {
            least = units;
            out.push(if kind == 0 {
                Member::Set(i)
            } else {
                Member::Walked(i)
            });
        }
    }
    out
}

/// The members of a front (sorted by bytes, units falling) worth a schedule: the first,
/// and each that recomputes at least 2^-`shift` less than the last member kept. A budget
/// then gets a set within that share of the front's best below it.
fn thin(front: Vec<Member>, units: impl Fn(Member) -> u64, shift: u32) -> Vec<Member> {
    let mut last = u64::MAX;
    let mut out = Vec::new();
    for m in front {
        let u = units(m);
        if last == u64::MAX || u < last - (last >> shift) {
            last = u;
            out.push(m);
        }
    }
    out
}

/// A kept set with the model's own figures.
#[derive(Clone)]
struct Cut {
    /// Pair indices kept, sorted.
    kept: Vec<u32>,
    bytes: u64,
    units: u64,
}

impl Model {
    /// The network of `ctx`'s graph; `strict`: no op reading state that anything writes in
    /// place may run again (the fallback when the default rule gave no schedule).
    fn new(ctx: &Context<'_>, b0: usize, strict: bool) -> Self {
        let g = ctx.g;
        let mut index = vec![u32::MAX; g.num_tensors()];
        let mut tensors = Vec::new();
        // Storages, not tensors: a view read in the backward keeps its base's storage, and
        // two views of one storage cost its bytes once. A view is remade from its base by
        // its view op, which costs nothing to speak of and needs no node.
        let forward_root = |r: TensorId| {
            ctx.validity[r.index()] == Validity::Current
                && g.producer(r).is_none_or(|p| p.index() < b0)
        };
        for i in 0..b0 {
            for &t in ctx.inputs(i).iter().chain(ctx.outputs(i)) {
                let r = ctx.root[t.index()];
                if forward_root(r) && index[r.index()] == u32::MAX {
                    index[r.index()] = tensors.len() as u32;
                    tensors.push(r);
                }
            }
        }
        let pair =
            |t: TensorId| Some(index[ctx.root[t.index()].index()]).filter(|&k| k != u32::MAX);
        let mut needed = vec![false; tensors.len()];
        for i in b0..ctx.n {
            for &t in ctx.inputs(i) {
                if let Some(k) = pair(t) {
                    needed[k as usize] = true;
                }
            }
        }
        let first_op = 2 + 2 * tensors.len();
        let mut net = Network::new(first_op + b0);
        let mut ops = Vec::with_capacity(b0);
        let mut op_inputs = Vec::with_capacity(b0);
        let mut producer = vec![None; tensors.len()];
        for i in 0..b0 {
            let node = first_op + i;
            let rerun = may_rerun(ctx, i, strict);
            let units = ctx.cost_units[i];
            net.edge(
                SOURCE,
                node,
                if rerun {
                    Cap::Linear { bytes: 0, units }
                } else {
                    Cap::Inf
                },
            );
            ops.push(units);
            let mut ins: Vec<u32> = ctx.inputs(i).iter().filter_map(|&u| pair(u)).collect();
            ins.sort_unstable();
            ins.dedup();
            for &k in &ins {
                net.edge(3 + 2 * k as usize, node, Cap::Inf);
            }
            op_inputs.push(ins);
            for &t in ctx.outputs(i) {
                let Some(k) = pair(t).filter(|_| ctx.root[t.index()] == t) else {
                    continue;
                };
                net.edge(node, 2 + 2 * k as usize, Cap::Inf);
                if rerun && ctx.freeable[t.index()] {
                    producer[k as usize] = Some(node);
                }
            }
        }
        let mut bytes = Vec::with_capacity(tensors.len());
        for (k, &t) in tensors.iter().enumerate() {
            let size = g.storage_bytes(t);
            bytes.push(size);
            net.edge(
                2 + 2 * k,
                3 + 2 * k,
                Cap::Linear {
                    bytes: size,
                    units: 0,
                },
            );
            if producer[k].is_none() {
                net.edge(SOURCE, 2 + 2 * k, Cap::Inf);
            }
            if needed[k] {
                net.edge(3 + 2 * k, SINK, Cap::Inf);
            }
        }
        let needed_list = (0..tensors.len() as u32)
            .filter(|&k| needed[k as usize])
            .collect();
        Model {
            net,
            b0,
            tensors,
            bytes,
            needed_list,
            producer,
            ops,
            first_op,
            op_inputs,
        }
    }

    /// The minimum cut at weights `(a, b)`, read back as a kept set.
    fn solve(&self, a: u128, b: u128) -> Cut {
        self.solve_on(&self.net, a, b)
    }

    /// [`Model::solve`] on `net` (this model's network, or a copy with other byte prices).
    fn solve_on(&self, net: &Network, a: u128, b: u128) -> Cut {
        let (_, side) = net.min_cut(SOURCE, SINK, a, b);
        let kept = self.kept_of(&side);
        let bytes = kept.iter().map(|&k| self.bytes[k as usize]).sum();
        let units = (0..self.ops.len())
            .filter(|&j| !side[self.first_op + j])
            .map(|j| self.ops[j])
            .sum();
        Cut { kept, bytes, units }
    }

    /// The kept sets to build: the hull's vertices, the minimum cuts between them, and
    /// kept sets off the hull between them (greedy walks, jittered cuts, and the Pareto
    /// walks' fronts where no other set does as well).
    fn kept_sets(&self) -> Vec<Vec<u32>> {
        let (hull, ties) = self.hull();
        let mut sets: Vec<Vec<u32>> = Vec::new();
        for pair in hull.windows(2) {
            sets.extend(self.greedy(&pair[0].kept, pair[1].bytes));
            sets.extend(self.shed(&pair[1].kept, pair[0].bytes));
        }
        let walked: Vec<Point> = hull
            .windows(2)
            .collect::<Vec<_>>()
            .par_iter()
            .flat_map_iter(|pair| {
                let up = self.pareto(&pair[0].kept, pair[1].bytes, Direction::Add);
                let down = self.pareto(&pair[1].kept, pair[0].bytes, Direction::Drop);
                up.into_iter().chain(down)
            })
            .collect();
        sets.extend(hull.into_iter().map(|c| c.kept));
        for &(a, b) in &ties {
            sets.extend(self.chain(a, b));
        }
        sets.extend(self.jittered(&ties));
        sets.sort();
        sets.dedup();
        let found = self.found(&sets, &walked);
        sets.extend(found);
        sets.sort();
        sets.dedup();
        sets
    }

    /// The walks' sets and one swap from every member of the front so far (of `sets` and
    /// `walked` together), those on the final front and [`thin`]ned.
    fn found(&self, sets: &[Vec<u32>], walked: &[Point]) -> Vec<Vec<u32>> {
        let known: Vec<(u64, u64)> = sets
            .par_iter()
            .map(|s| {
                let (mask, bytes) = self.mask_of(s);
                (bytes, self.units_of(&mask))
            })
            .collect();
        let mask_at = |m: Member| match m {
            Member::Set(i) => self.mask_of(&sets[i]).0,
            Member::Walked(i) => walked[i].mask.clone(),
        };
        let units_at = |m: Member, found: &[(u64, u64)]| match m {
            Member::Set(i) => known[i].1,
            Member::Walked(i) => found[i].1,
        };
        // One swap from every member of the front so far (compact: the member and the swap).
        let mut found: Vec<(u64, u64)> = walked.iter().map(|p| (p.bytes, p.units)).collect();
        let front = lower_front(&known, found.iter().copied());
        let front = thin(front, |m| units_at(m, &found), SWAP_FRONT);
        let swapped: Vec<Swap> = front
            .par_iter()
            .flat_map_iter(|&m| self.swaps(&mask_at(m)).into_iter().map(move |s| (m, s)))
            .collect();
        found.extend(swapped.iter().map(|(_, s)| (s.bytes, s.units)));
        let front = lower_front(&known, found.iter().copied());
        thin(front, |m| units_at(m, &found), MAX_FOUND)
            .into_iter()
            .filter_map(|m| match m {
                Member::Set(_) => None,
                Member::Walked(i) if i < walked.len() => Some(kept_in(&walked[i].mask)),
                Member::Walked(i) => {
                    let (base, s) = &swapped[i - walked.len()];
                    let mut mask = mask_at(*base);
                    mask[s.drop as usize] = false;
                    mask[s.add as usize] = true;
                    Some(kept_in(&mask))
                }
            })
            .collect()
    }

    /// Kept sets one swap from `mask`: one kept tensor dropped (of the [`SWAP_TRIES`]
    /// whose own producer costs least per byte) and one recomputed tensor kept instead (of
    /// the [`SWAP_TRIES`] that cost most per byte), where that recomputes less or keeps
    /// fewer bytes. A walk adds or drops only; a budget between two front members can need
    /// both (keeping one convolution's output instead of another's).
    fn swaps(&self, mask: &[bool]) -> Vec<SwapPoint> {
        let (units, adds) = self.recompute_of(mask);
        let adds = self.ranked(adds, true, SWAP_TRIES);
        let drops = self.ranked(self.droppable(mask).collect(), false, SWAP_TRIES);
        let bytes: u64 = (0..mask.len())
            .filter(|&k| mask[k])
            .map(|k| self.bytes[k])
            .sum();
        let mut m = mask.to_vec();
        let mut out = Vec::new();
        for &d in &drops {
            for &a in adds.iter().filter(|&&a| a != d) {
                m[d as usize] = false;
                m[a as usize] = true;
                let u = self.units_of(&m);
                let b = bytes - self.bytes[d as usize] + self.bytes[a as usize];
                if u < units || b < bytes {
                    out.push(SwapPoint {
                        bytes: b,
                        units: u,
                        drop: d,
                        add: a,
                    });
                }
                m[a as usize] = false;
                m[d as usize] = true;
            }
        }
        out
    }

    /// A Pareto walk from hull vertex `start` towards the neighbouring vertex's bytes
    /// `bound`: the front of (bytes, recompute) over the kept sets reached by adding
    /// ([`Direction::Add`], up to `bound`) or dropping ([`Direction::Drop`], down to
    /// `bound`) one tensor at a time. Each expansion takes the unexpanded front member
    /// nearest `start` and tries its [`PARETO_TRIES`] tensors whose own producer costs most
    /// per byte (to add) or least (to drop); a result joins the front unless a member keeps
    /// no more bytes and recomputes no more. Greedy walks follow one path of best ratios,
    /// whose steps can be one large tensor each (a CNN's block outputs); the front
    /// holds the mixes in between, where a budget between two vertices is served (at most
    /// [`PARETO_EXPANSIONS`] expansions).
    fn pareto(&self, start: &[u32], bound: u64, dir: Direction) -> Vec<Point> {
        let (mask, bytes) = self.mask_of(start);
        let (units, _) = self.recompute_of(&mask);
        let mut front = vec![Point {
            bytes,
            units,
            mask,
            expanded: false,
        }];
        for _ in 0..PARETO_EXPANSIONS {
            let next = match dir {
                Direction::Add => front.iter().position(|p| !p.expanded),
                Direction::Drop => front.iter().rposition(|p| !p.expanded),
            };
            let Some(i) = next else { break };
            front[i].expanded = true;
            let (b, u) = (front[i].bytes, front[i].units);
            let mut mask = front[i].mask.clone();
            let tries = match dir {
                Direction::Add => {
                    let room = bound.saturating_sub(b);
                    let (_, recomputed) = self.recompute_of(&mask);
                    let fit = recomputed
                        .into_iter()
                        .filter(|&k| self.bytes[k as usize] < room);
                    self.ranked(fit.collect(), true, PARETO_TRIES)
                }
                Direction::Drop => {
                    let fit = self
                        .droppable(&mask)
                        .filter(|&k| b - self.bytes[k as usize] > bound);
                    self.ranked(fit.collect(), false, PARETO_TRIES)
                }
            };
            for k in tries {
                let add = matches!(dir, Direction::Add);
                mask[k as usize] = add;
                let nu = self.units_of(&mask);
                let nb = if add {
                    b + self.bytes[k as usize]
                } else {
                    b - self.bytes[k as usize]
                };
                let worth = !add || nu < u;
                if worth && !front.iter().any(|p| p.bytes <= nb && p.units <= nu) {
                    front.retain(|p| !(nb <= p.bytes && nu <= p.units));
                    let at = front.partition_point(|p| (p.bytes, p.units) < (nb, nu));
                    let point = Point {
                        bytes: nb,
                        units: nu,
                        mask: mask.clone(),
                        expanded: false,
                    };
                    front.insert(at, point);
                }
                mask[k as usize] = !add;
            }
        }
        front.retain(|p| p.bytes != bytes || p.units != units);
        front
    }

    /// The lower convex hull of (bytes, recompute) over all cuts, by bytes, and the weights
    /// at which each two neighbouring vertices tie.
    fn hull(&self) -> (Vec<Cut>, Vec<(u128, u128)>) {
        let total_units: u128 = self.ops.iter().map(|&o| u128::from(o)).sum::<u128>() + 1;
        let total_bytes: u128 = self.bytes.iter().map(|&b| u128::from(b)).sum::<u128>() + 1;
        let least_bytes = self.solve(total_units, 1);
        let least_units = self.solve(1, total_bytes);
        let mut solves = 2;
        let mut out = vec![least_bytes.clone()];
        let mut ties = Vec::new();
        self.between(&least_bytes, &least_units, &mut solves, &mut out, &mut ties);
        out.push(least_units);
        out.dedup_by(|x, y| x.kept == y.kept);
        (out, ties)
    }

    /// Appends the hull's vertices strictly between `a` and `b`, by bytes, and the weights
    /// of each segment found.
    fn between(
        &self,
        a: &Cut,
        b: &Cut,
        solves: &mut usize,
        out: &mut Vec<Cut>,
        ties: &mut Vec<(u128, u128)>,
    ) {
        if a.bytes >= b.bytes || a.units <= b.units || *solves >= MAX_CUTS {
            return;
        }
        let (wa, wb) = (u128::from(a.units - b.units), u128::from(b.bytes - a.bytes));
        let c = self.solve(wa, wb);
        *solves += 1;
        let value = |x: &Cut| wa * u128::from(x.bytes) + wb * u128::from(x.units);
        if value(&c) < value(a) {
            self.between(a, &c, solves, out, ties);
            out.push(c.clone());
            self.between(&c, b, solves, out, ties);
        } else {
            ties.push((wa, wb));
        }
    }

    /// The minimum cuts at weights `(a, b)` from the smallest source side to the largest
    /// ([`Network::min_cut_chain`]): at a hull segment's weights every one of them lies on
    /// the segment, so each is the least recompute for its bytes. At most [`CHAIN_POINTS`],
    /// evenly spaced along the chain.
    fn chain(&self, a: u128, b: u128) -> Vec<Vec<u32>> {
        let (mut side, groups) = self.net.min_cut_chain(SOURCE, SINK, a, b);
        let stride = groups.len().div_ceil(CHAIN_POINTS).max(1);
        let mut out = Vec::new();
        for (i, group) in groups.iter().enumerate() {
            for &v in group {
                side[v] = true;
            }
            if (i + 1) % stride == 0 || i + 1 == groups.len() {
                out.push(self.kept_of(&side));
            }
        }
        out
    }

    /// Cuts near the hull: at each segment's weights, on copies of the network whose bytes
    /// and op costs are priced up to [`JITTER`] off (a fixed pseudo-random factor per node
    /// and copy).
    /// Each is a real kept set, off the hull by construction, often at bytes between two
    /// vertices where the hull has nothing: a different mix of tensors kept, which a
    /// budget between the vertices can use.
    fn jittered(&self, ties: &[(u128, u128)]) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        for copy in 0..JITTER_COPIES {
            let net = self.net.map_caps(|tail, bytes, units| {
                let h = splitmix((tail as u64) << 16 | copy);
                let f = 1.0 + JITTER * ((h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0);
                let scale = |x: u64| (x as f64 * f).round() as u64;
                (scale(bytes), scale(units))
            });
            for &(a, b) in ties {
                out.push(self.solve_on(&net, a, b).kept);
            }
        }
        out
    }

    /// The tensors a source side keeps.
    fn kept_of(&self, side: &[bool]) -> Vec<u32> {
        (0..self.tensors.len())
            .filter(|&k| side[2 + 2 * k] && !side[3 + 2 * k])
            .map(|k| k as u32)
            .collect()
    }

    /// The model's recompute cost of keeping the tensors of `kept` (a mask): the producers
    /// of every needed tensor not kept, closed over their own inputs; and the tensors so
    /// recomputed.
    fn recompute_of(&self, kept: &[bool]) -> (u64, Vec<u32>) {
        let mut recomputed = Vec::new();
        let units = self.closure(kept, Some(&mut recomputed));
        (units, recomputed)
    }

    /// [`Model::recompute_of`]'s cost alone.
    fn units_of(&self, kept: &[bool]) -> u64 {
        self.closure(kept, None)
    }

    /// The walk of [`Model::recompute_of`], in this thread's reused buffers (the Pareto
    /// walks call it hundreds of thousands of times on a 700-op graph).
    fn closure(&self, kept: &[bool], mut recomputed: Option<&mut Vec<u32>>) -> u64 {
        CLOSURE.with(|cell| {
            let mut sc = cell.borrow_mut();
            let sc = &mut *sc;
            sc.begin(self.tensors.len(), self.ops.len());
            let stamp = sc.stamp;
            sc.stack.clear();
            sc.stack.extend_from_slice(&self.needed_list);
            let mut units = 0u64;
            while let Some(k) = sc.stack.pop() {
                let k = k as usize;
                if kept[k] || std::mem::replace(&mut sc.seen[k], stamp) == stamp {
                    continue;
                }
                // Graph inputs and storages that are never freed stay resident: readable.
                let Some(node) = self.producer[k] else {
                    continue;
                };
                if let Some(r) = recomputed.as_deref_mut() {
                    r.push(k as u32);
                }
                let j = node - self.first_op;
                if std::mem::replace(&mut sc.ran[j], stamp) != stamp {
                    units += self.ops[j];
                    sc.stack.extend_from_slice(&self.op_inputs[j]);
                }
            }
            units
        })
    }

    /// Kept sets off the hull, from vertex `a` towards the next vertex's bytes `limit`: one
    /// tensor more at a time, the one whose keeping saves the most recompute per byte (of
    /// the [`GREEDY_TRIES`] recomputed tensors with the most recompute per byte of their
    /// own producer), at most [`GREEDY_STEPS`] times. The hull's vertices are optimal for
    /// their bytes; budgets between two of them are served by these.
    fn greedy(&self, a: &[u32], limit: u64) -> Vec<Vec<u32>> {
        let (mut mask, mut bytes) = self.mask_of(a);
        let (mut units, mut recomputed) = self.recompute_of(&mask);
        let mut out = Vec::new();
        for _ in 0..GREEDY_STEPS {
            let room = limit.saturating_sub(bytes);
            let fit = recomputed
                .iter()
                .copied()
                .filter(|&k| self.bytes[k as usize] < room);
            let tries = self.ranked(fit.collect(), true, GREEDY_TRIES);
            let mut best: Option<(f64, u32, u64, Vec<u32>)> = None;
            for k in tries {
                mask[k as usize] = true;
                let (u, r) = self.recompute_of(&mask);
                mask[k as usize] = false;
                let gain = units.saturating_sub(u) as f64 / self.bytes[k as usize].max(1) as f64;
                if gain > 0.0 && best.as_ref().is_none_or(|b| gain > b.0) {
                    best = Some((gain, k, u, r));
                }
            }
            let Some((_, k, u, r)) = best else { break };
            mask[k as usize] = true;
            bytes += self.bytes[k as usize];
            units = u;
            recomputed = r;
            out.push(kept_in(&mask));
        }
        out
    }

    /// Kept sets off the hull, from vertex `b` down towards the previous vertex's bytes
    /// `floor`: one tensor less at a time, the one whose recomputation costs the least per
    /// byte freed (of the [`GREEDY_TRIES`] kept tensors whose own producer costs least per
    /// byte), at most [`GREEDY_STEPS`] times.
    fn shed(&self, b: &[u32], floor: u64) -> Vec<Vec<u32>> {
        let (mut mask, mut bytes) = self.mask_of(b);
        let mut units = self.units_of(&mask);
        let mut out = Vec::new();
        for _ in 0..GREEDY_STEPS {
            let fit = self
                .droppable(&mask)
                .filter(|&k| bytes - self.bytes[k as usize] > floor);
            let tries = self.ranked(fit.collect(), false, GREEDY_TRIES);
            let mut best: Option<(f64, u32, u64)> = None;
            for k in tries {
                mask[k as usize] = false;
                let u = self.units_of(&mask);
                mask[k as usize] = true;
                let loss = u.saturating_sub(units) as f64 / self.bytes[k as usize] as f64;
                if best.as_ref().is_none_or(|b| loss < b.0) {
                    best = Some((loss, k, u));
                }
            }
            let Some((_, k, u)) = best else { break };
            mask[k as usize] = false;
            bytes -= self.bytes[k as usize];
            units = u;
            out.push(kept_in(&mask));
        }
        out
    }

    /// The cost of a storage's own producer per byte of it.
    fn own_ratio(&self, k: u32) -> f64 {
        let j = self.producer[k as usize].map_or(0, |n| n - self.first_op);
        self.ops[j] as f64 / self.bytes[k as usize].max(1) as f64
    }

    /// The first `n` of `ks` by [`Model::own_ratio`], dearest first (the tensors most worth
    /// keeping) or cheapest first (the ones most worth dropping); ties by index.
    fn ranked(&self, mut ks: Vec<u32>, dearest: bool, n: usize) -> Vec<u32> {
        let own = |k: u32| self.own_ratio(k);
        if dearest {
            ks.sort_by(|&x, &y| own(y).total_cmp(&own(x)).then(x.cmp(&y)));
        } else {
            ks.sort_by(|&x, &y| own(x).total_cmp(&own(y)).then(x.cmp(&y)));
        }
        ks.truncate(n);
        ks
    }

    /// The tensors `mask` keeps that a plan may drop: recomputable, of some bytes.
    fn droppable<'a>(&'a self, mask: &'a [bool]) -> impl Iterator<Item = u32> + 'a {
        (0..self.tensors.len() as u32).filter(move |&k| {
            mask[k as usize] && self.producer[k as usize].is_some() && self.bytes[k as usize] > 0
        })
    }

    /// A kept set as a mask, and its bytes.
    fn mask_of(&self, kept: &[u32]) -> (Vec<bool>, u64) {
        let mut mask = vec![false; self.tensors.len()];
        for &k in kept {
            mask[k as usize] = true;
        }
        (mask, kept.iter().map(|&k| self.bytes[k as usize]).sum())
    }

    /// The schedule that keeps `kept` and its measured figures.
    fn candidate(&self, ctx: &Context<'_>, kept: &[u32]) -> Result<Candidate, Infeasible> {
        let mut keep = vec![false; ctx.g.num_tensors()];
        for &k in kept {
            keep[ctx.root[self.tensors[k as usize].index()].index()] = true;
        }
        let steps = schedule(ctx, self.b0, &keep)?;
        let fitness = crate::sublinear::evaluate::fitness_of(ctx, &steps, 0);
        if !fitness.feasible {
            return Err(Infeasible::NoFixpoint);
        }
        Ok(Candidate {
            saved: sgc_plan_format::plan::saved_bytes(ctx.g, &steps),
            units: fitness.cost,
            peak: fitness.peak,
            steps,
        })
    }
}

/// The kept set of a mask, in order.
fn kept_in(mask: &[bool]) -> Vec<u32> {
    (0..mask.len() as u32)
        .filter(|&i| mask[i as usize])
        .collect()
}

/// Whether forward op `i` may run again in the backward: it may run again at all, and no
/// op writes in place, before the last read of its outputs, state it reads (`strict`: no
/// op writes it at all).
fn may_rerun(ctx: &Context<'_>, i: usize, strict: bool) -> bool {
    if !ctx.rerunnable[i] {
        return false;
    }
    let hazard = ctx.dirty_at[i];
    if hazard == NO_HAZARD {
        return true;
    }
    if strict {
        return false;
    }
    let last = ctx.out_roots[i]
        .iter()
        .filter_map(|&r| ctx.last_access(r))
        .max()
        .unwrap_or(0);
    hazard > last
}

/// Nothing to decide while the schedule is built: what is released is decided up front.
struct Keep;

impl Policy for Keep {}

/// Originals in traced order; when the backward starts, every freeable forward storage not
/// in `keep` is released; missing inputs are recomputed (and stay for later readers).
fn schedule(ctx: &Context<'_>, b0: usize, keep: &[bool]) -> Result<Vec<(OpId, bool)>, Infeasible> {
    let mut st = State::new(ctx);
    let mut policy = Keep;
    for i in 0..ctx.n {
        st.pos = i;
        if i == b0 {
            for &r in &ctx.freeable_roots {
                if st.resident[r.index()] && !keep[r.index()] {
                    st.release(r);
                }
            }
        }
        let op = OpId::new(i);
        st.ensure_inputs(op, &mut policy)?;
        st.emit(op, false, &mut policy)?;
    }
    st.pos = ctx.n;
    st.ensure_outputs(&mut policy)?;
    Ok(st.steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The position of the graph's first backward op.
    fn first_backward(ctx: &Context<'_>) -> usize {
        (0..ctx.n)
            .find(|&i| ctx.g.phase(OpId::new(i)) == Some(Phase::Backward))
            .unwrap()
    }

    fn load(name: &str) -> sgc_ir::Graph {
        crate::testing::load(&format!("graphs/{name}"))
    }

    /// The objective of keeping `kept` by exhaustive rules, independent of the network:
    /// every needed tensor is kept (its bytes), unrecomputable (kept: its bytes) or made by
    /// its producer running again (its cost, once), whose inputs are needed in turn.
    fn objective(m: &Model, kept: &[bool], a: u128, b: u128) -> u128 {
        let mut paid = vec![false; m.tensors.len()];
        let mut ran = vec![false; m.ops.len()];
        let mut stack: Vec<usize> = m.needed_list.iter().map(|&k| k as usize).collect();
        let mut value = 0u128;
        while let Some(k) = stack.pop() {
            if std::mem::replace(&mut paid[k], true) {
                continue;
            }
            match m.producer[k] {
                Some(node) if !kept[k] => {
                    let j = node - m.first_op;
                    if !std::mem::replace(&mut ran[j], true) {
                        value += b * u128::from(m.ops[j]);
                        stack.extend(m.op_inputs[j].iter().map(|&u| u as usize));
                    }
                }
                _ => value += a * u128::from(m.bytes[k]),
            }
        }
        value
    }

    #[test]
    fn every_cut_is_the_exhaustive_optimum() {
        let g = load("tiny_mlp.json");
        let ctx = Context::new(&g);
        let b0 = first_backward(&ctx);
        let m = Model::new(&ctx, b0, false);
        let free: Vec<usize> = (0..m.tensors.len())
            .filter(|&k| m.producer[k].is_some())
            .collect();
        assert!(free.len() >= 6 && free.len() <= 14, "{}", free.len());
        let unit = 1u128 << 30;
        for (a, b) in [(1, 0), (0, 1), (1, unit), (unit, 1), (3, 7 * unit), (1, 1)] {
            let (a, b): (u128, u128) = (a, b);
            let (a, b) = (a.max(1), b.max(1));
            let cut = m.solve(a, b);
            let mut mask = vec![false; m.tensors.len()];
            for &k in &cut.kept {
                mask[k as usize] = true;
            }
            let got = objective(&m, &mask, a, b);
            assert_eq!(got, a * u128::from(cut.bytes) + b * u128::from(cut.units));
            let mut best = u128::MAX;
            for bits in 0u32..1 << free.len() {
                let mut kept = vec![false; m.tensors.len()];
                for (i, &k) in free.iter().enumerate() {
                    kept[k] = bits >> i & 1 == 1;
                }
                best = best.min(objective(&m, &kept, a, b));
            }
            assert_eq!(got, best, "weights ({a}, {b})");
        }
    }

    /// The least recompute (model units) of any kept set within each budget, by brute
    /// force over every subset of the recomputable tensors; and the same from the kept
    /// sets the strategy builds.
    fn best_within(m: &Model, sets: &[Vec<u32>], budgets: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let free: Vec<usize> = (0..m.tensors.len())
            .filter(|&k| m.producer[k].is_some())
            .collect();
        let fixed: u64 = (0..m.tensors.len())
            .filter(|&k| m.producer[k].is_none())
            .map(|k| m.bytes[k])
            .sum();
        let mut exact = vec![u64::MAX; budgets.len()];
        for bits in 0u32..1 << free.len() {
            let mut kept = vec![false; m.tensors.len()];
            let mut bytes = 0;
            for (i, &k) in free.iter().enumerate() {
                if bits >> i & 1 == 1 {
                    kept[k] = true;
                    bytes += m.bytes[k];
                }
            }
            let units = m.units_of(&kept);
            for (e, &b) in exact.iter_mut().zip(budgets) {
                if bytes + fixed <= b {
                    *e = (*e).min(units);
                }
            }
        }
        let mut built = vec![u64::MAX; budgets.len()];
        for s in sets {
            let (mask, _) = m.mask_of(s);
            let bytes: u64 = s
                .iter()
                .filter(|&&k| m.producer[k as usize].is_some())
                .map(|&k| m.bytes[k as usize])
                .sum();
            let units = m.units_of(&mask);
            for (e, &b) in built.iter_mut().zip(budgets) {
                if bytes + fixed <= b {
                    *e = (*e).min(units);
                }
            }
        }
        (exact, built)
    }

    #[test]
    fn kept_sets_reach_the_least_recompute_at_every_budget_of_a_small_graph() {
        // Between two hull vertices the best kept set is off the hull. The greedy walks and
        // jittered cuts alone missed it at 12 of tiny_cnn's 56 budgets (up to 1.29x the
        // least); with the Pareto walks and the swap pass, at one (the same 1.29x).
        // Checked against every subset of the tensors a plan may drop.
        for (name, allowed) in [("tiny_mlp.json", 0), ("tiny_cnn.json", 1)] {
            let g = load(name);
            let ctx = Context::new(&g);
            let b0 = first_backward(&ctx);
            let m = Model::new(&ctx, b0, false);
            let free = (0..m.tensors.len())
                .filter(|&k| m.producer[k].is_some())
                .count();
            assert!(free <= 20, "{name}: {free} tensors to enumerate");
            let total: u64 = m.bytes.iter().sum();
            let budgets: Vec<u64> = (0..=64).map(|i| total * i / 64).collect();
            let (exact, built) = best_within(&m, &m.kept_sets(), &budgets);
            let mut missed = 0;
            for ((b, e), got) in budgets.iter().zip(&exact).zip(&built) {
                if *e == u64::MAX {
                    continue;
                }
                assert!(
                    got >= e,
                    "{name}: budget {b}: below the least of every subset"
                );
                missed += usize::from(got != e);
            }
            assert!(
                missed <= allowed,
                "{name}: {missed} budgets above the least"
            );
        }
    }

    #[test]
    fn hull_vertices_trade_bytes_for_recompute() {
        let g = load("tiny_cnn.json");
        let ctx = Context::new(&g);
        let b0 = first_backward(&ctx);
        let (hull, _) = Model::new(&ctx, b0, false).hull();
        assert!(hull.len() >= 2);
        for w in hull.windows(2) {
            assert!(w[0].bytes < w[1].bytes && w[0].units > w[1].units);
        }
        assert_eq!(hull.last().unwrap().units, 0);
    }
}
