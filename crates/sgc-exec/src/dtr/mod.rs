//! Run-time DTR (MegEngine's dynamic tensor rematerialisation): eviction decided while the
//! step runs, on a real device allocator, with recomputation on demand.
//!
//! # Method
//!
//! One event-driven engine (`engine`) walks the traced order. For each op it pins the
//! op's input and output storages, recomputes any evicted input (its producer runs again,
//! recursively, with that producer's own operands pinned), allocates the outputs from one
//! pool of `memory` bytes ([`pool`]: best fit, coalescing, compaction only when no free
//! block fits), runs the op, and frees what reached its last use. Eviction follows
//! MegEngine's runtime: with an `eviction_threshold`, storages are evicted before each op
//! while the live bytes (persistent included) exceed it; with or without one, whenever no
//! free block can serve a request. The victim is the candidate with the lowest DTR score
//! (`policy`): recompute cost of its evicted neighbourhood over size times staleness,
//! staleness on a logical clock; candidates are at least `evictee_min_size` bytes and
//! never pinned; `sqrt_sampling` scores about sqrt(N) of them, drawn from a seeded stream.
//!
//! What may be evicted is a graph fact: activation storages of recomputable ops, never a
//! graph output's, never persistent tensors or inputs; a view is never evicted, its base
//! storage is. Recomputation re-runs the same deterministic kernel on the same bytes, so
//! results are bitwise those of the unplanned run.
//!
//! Where ops run is a `Target`: a backend's kernels on one pool-sized allocation
//! ([`DtrExecutor`], the CPU or CUDA backend; moving a storage is a real copy), or a clock
//! advanced by each op's cost from the graph ([`Simulator`]: no kernels, no memory; the
//! same engine, so big graphs can be explored on a CPU). Both score candidates by the
//! graph's costs, so a run and its simulation evict alike.
//!
//! Everything is counted: evictions, recomputations, requests no free block could serve,
//! compactions and bytes moved, the live peak and the highest pool address touched (what
//! a growing allocator would have taken from the device), and time per kind of work.
//! With `trace`, every event is recorded ([`Event`]) so that tests can replay a run
//! against the graph alone.

mod engine;
mod facts;
mod policy;
pub mod pool;
mod run;

pub use pool::{Pool, PoolStats};
pub use run::{DtrExecutor, RunTimeDtr};

use crate::error::ExecError;
use engine::{Engine, Names};
use facts::Facts;
use serde::Serialize;
use sgc_ir::{DeviceProfile, Graph, OpId, TensorId};
use std::time::Instant;

/// MegEngine's default smallest evictee.
pub const DEFAULT_EVICTEE_MIN_SIZE: u64 = 1 << 20;

/// How run-time DTR runs.
#[derive(Clone, Debug, PartialEq)]
pub struct DtrOptions {
    /// Device bytes: the pool everything lives in (persistent storage included).
    pub memory: u64,
    /// Live bytes (persistent included) above which storages are evicted before each op;
    /// `None`: evict only when no free block can serve a request.
    pub eviction_threshold: Option<u64>,
    /// Smallest storage that may be evicted.
    pub evictee_min_size: u64,
    /// Score only about sqrt(N) sampled candidates.
    pub sqrt_sampling: bool,
    /// Seed of the sampling stream.
    pub seed: u64,
    /// Pool alignment (block sizes and offsets are multiples of it).
    pub align: u64,
    /// Op costs (for the score, and the simulation's clock): ops without `time_us` costed
    /// by their roofline estimate on this device; `None`: the format's rule.
    pub device_profile: Option<DeviceProfile>,
    /// Recomputations allowed in one step before the run stops as thrashing
    /// ([`crate::error::ExecError::Thrashing`]); `None`: 64 per op of the graph.
    pub max_recomputes: Option<u64>,
    /// Record every event ([`Event`]).
    pub trace: bool,
}

impl DtrOptions {
    /// `memory` bytes, no threshold, MegEngine's defaults otherwise.
    pub fn new(memory: u64) -> Self {
        DtrOptions {
            memory,
            eviction_threshold: None,
            evictee_min_size: DEFAULT_EVICTEE_MIN_SIZE,
            sqrt_sampling: false,
            seed: 0,
            align: sgc_plan_format::DEFAULT_ALIGN,
            device_profile: None,
            max_recomputes: None,
            trace: false,
        }
    }
}

/// What the engine did, summed over the steps run. Durations are in the target's unit
/// (seconds on a backend; the graph's cost unit in simulation).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DtrCounters {
    pub steps: usize,
    /// Kernel launches of the traced order (first runs).
    pub launches: u64,
    /// Kernel launches that recomputed an evicted storage.
    pub recomputes: u64,
    /// Storages evicted while alive, and their bytes.
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Storages evicted at their last use because an evicted-able storage may need them.
    pub drops: u64,
    /// Requests that no free block could serve at first.
    pub unserved_requests: u64,
    /// Compactions (defragmentations) and bytes they moved.
    pub defrags: u64,
    pub moved_bytes: u64,
    /// Time in first runs, recomputations and compaction copies.
    pub compute: f64,
    pub recompute: f64,
    pub defrag: f64,
    /// The graph's cost of the first runs and of the recomputations.
    pub compute_cost: f64,
    pub recompute_cost: f64,
}

/// Why a block was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FreeKind {
    /// Last use passed and nothing retains it (or the step ended).
    Release,
    /// Evicted while alive.
    Evict,
    /// Evicted at its last use, retained for recomputing others.
    Drop,
    /// A recomputation's output that nothing retains.
    Temporary,
}

/// One event of the engine, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Event {
    StepStart,
    /// The engine starts on an op (a first run or a recomputation): from here to its
    /// `Exit` the op's operands are pinned.
    Enter {
        op: OpId,
        recompute: bool,
    },
    Launch {
        op: OpId,
        recompute: bool,
    },
    Exit {
        op: OpId,
    },
    Alloc {
        root: TensorId,
        offset: u64,
        bytes: u64,
    },
    Free {
        root: TensorId,
        offset: u64,
        why: FreeKind,
    },
    Move {
        root: TensorId,
        from: u64,
        to: u64,
        bytes: u64,
    },
}

/// Where the engine's ops run (see the [module docs](self)).
pub(crate) trait Target {
    /// Runs `op`, every storage root `r` it touches at pool offset `offsets[r]`; returns
    /// how long it took.
    fn launch(&mut self, op: OpId, offsets: &[u64]) -> Result<f64, ExecError>;
    /// Moves `bytes` at pool offset `from` to `to` (`to < from`; the ranges may overlap).
    fn copy(&mut self, from: u64, to: u64, bytes: u64) -> Result<f64, ExecError>;
    /// Writes input `root`'s bound value at `offset`.
    fn write_input(&mut self, root: TensorId, offset: u64) -> Result<(), ExecError>;
}

/// What a DTR run or simulation measured, beside its bounds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DtrReport {
    /// `cpu`, `cuda:0 (...)`, or `simulated`.
    pub device: String,
    /// Unit of the durations: `s` on a backend, the cost source in simulation.
    pub time_unit: String,
    pub memory: u64,
    pub eviction_threshold: Option<u64>,
    pub evictee_min_size: u64,
    pub sqrt_sampling: bool,
    pub counters: DtrCounters,
    pub pool: PoolStats,
    pub persistent_bytes: u64,
    /// The memory model's peak of the traced order (no eviction, perfect packing).
    pub unplanned_peak: u64,
    /// Persistent bytes plus the largest op's footprint: no schedule needs less.
    pub lower_bound: u64,
    /// The graph's cost of one step (every kernel once) and where costs come from.
    pub step_cost: f64,
    pub cost_source: String,
    /// Recompute cost over the cost of the steps run (graph costs).
    pub recompute_share: f64,
    /// Wall time of the steps, and of it what was neither kernels, copies nor input
    /// writes: the engine's bookkeeping.
    pub wall_seconds: f64,
    pub bookkeeping_seconds: f64,
}

impl DtrReport {
    /// Measured time of recomputation over first runs (seconds on a backend).
    pub fn measured_recompute_share(&self) -> f64 {
        self.counters.recompute / self.counters.compute.max(f64::MIN_POSITIVE)
    }
}

/// The simulation: the engine on a clock (see the [module docs](self)).
pub struct Simulator {
    graph: Graph,
    options: DtrOptions,
    engine: Engine,
    clock: Clock,
    wall: f64,
}

/// The simulation's target: an op takes its cost; a copy reads and writes its bytes at
/// the device profile's bandwidth (free without a profile).
struct Clock {
    cost: Vec<f64>,
    us_per_byte: f64,
}

impl Target for Clock {
    fn launch(&mut self, op: OpId, _offsets: &[u64]) -> Result<f64, ExecError> {
        Ok(self.cost[op.index()])
    }
    fn copy(&mut self, _from: u64, _to: u64, bytes: u64) -> Result<f64, ExecError> {
        Ok(2.0 * bytes as f64 * self.us_per_byte)
    }
    fn write_input(&mut self, _root: TensorId, _offset: u64) -> Result<(), ExecError> {
        Ok(())
    }
}

impl Simulator {
    /// A simulation of `graph` under `options`; persistent storage is placed now.
    pub fn new(graph: &Graph, options: &DtrOptions) -> Result<Self, ExecError> {
        let writes_first: Vec<bool> = graph
            .op_ids()
            .map(|o| {
                graph
                    .op(o)
                    .kind
                    .is_some_and(|k| k.spec().effect == sgc_ir::ops::Effect::Writes)
            })
            .collect();
        let facts = Facts::new(
            graph,
            Facts::view_ops(graph),
            &writes_first,
            options.device_profile.as_ref(),
        );
        let clock = Clock {
            cost: facts.cost.clone(),
            us_per_byte: options
                .device_profile
                .as_ref()
                .map_or(0.0, |d| 1e6 / d.bandwidth_bytes_per_s()),
        };
        let engine = Engine::new(facts, Names::of(graph), options)?;
        Ok(Simulator {
            graph: graph.clone(),
            options: options.clone(),
            engine,
            clock,
            wall: 0.0,
        })
    }

    /// Simulates one training step.
    pub fn step(&mut self) -> Result<(), ExecError> {
        let start = Instant::now();
        let r = self.engine.step(&mut self.clock);
        self.wall += start.elapsed().as_secs_f64();
        r
    }

    /// What the steps so far did.
    pub fn report(&self) -> DtrReport {
        let unit = cost_source(&self.graph, self.options.device_profile.as_ref());
        report(
            &self.graph,
            &self.options,
            &self.engine,
            "simulated".into(),
            unit,
            self.wall,
            self.wall,
        )
    }

    /// Every event so far (with `options.trace`).
    pub fn trace(&self) -> Option<&[Event]> {
        self.engine.trace.as_deref()
    }
}

/// Simulates `steps` training steps of `graph` under `options`.
pub fn simulate(graph: &Graph, options: &DtrOptions, steps: usize) -> Result<DtrReport, ExecError> {
    let mut sim = Simulator::new(graph, options)?;
    for _ in 0..steps {
        sim.step()?;
    }
    Ok(sim.report())
}

fn cost_source(graph: &Graph, profile: Option<&DeviceProfile>) -> String {
    let mut s = sgc_ir::CostSources::default();
    for o in graph.op_ids() {
        s.insert(graph.op_cost_with(o, profile).1);
    }
    s.describe(profile)
}

fn report(
    graph: &Graph,
    options: &DtrOptions,
    engine: &Engine,
    device: String,
    time_unit: String,
    wall: f64,
    bookkeeping: f64,
) -> DtrReport {
    let c = &engine.counters;
    let step_cost = engine.facts.step_cost();
    DtrReport {
        device,
        time_unit,
        memory: engine.pool.size(),
        eviction_threshold: options.eviction_threshold,
        evictee_min_size: options.evictee_min_size,
        sqrt_sampling: options.sqrt_sampling,
        counters: c.clone(),
        pool: engine.pool.stats(),
        persistent_bytes: graph.persistent_bytes(),
        unplanned_peak: graph.memory_profile().peak,
        lower_bound: graph.lower_bound().bytes,
        step_cost,
        cost_source: cost_source(graph, options.device_profile.as_ref()),
        recompute_share: c.recompute_cost
            / (step_cost * c.steps.max(1) as f64).max(f64::MIN_POSITIVE),
        wall_seconds: wall,
        bookkeeping_seconds: bookkeeping,
    }
}

impl Names {
    fn of(graph: &Graph) -> Names {
        Names {
            ops: graph.ops().iter().map(|o| o.name.clone()).collect(),
            tensors: graph.tensors().iter().map(|t| t.name.clone()).collect(),
        }
    }
}

/// Bytes for messages: `812 B`, `3.20 KiB`, `1.50 GiB`.
pub(crate) use sgc_ir::human_bytes as fmt_bytes;
