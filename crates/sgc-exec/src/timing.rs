//! Step times that mean something: [`compare`] (planned vs unplanned), [`measure`] (one
//! executor) and [`profile`] (each op's time, written into the graph by [`timed_graph`]).
//!
//! # Method
//!
//! A first step pays costs that later steps do not: on CUDA, library initialisation
//! (cuBLAS handles and workspaces) and the first touch of every kernel; on the CPU, the
//! first touch of the arena's pages. So every measurement runs `warmup` untimed steps of
//! each executor before it times anything. [`compare`] then runs `steps` rounds, each one
//! step of both executors, planned first in even rounds and unplanned first in odd ones
//! (ABBA), so a drift of the machine (another process, clock boost, heat) falls on both
//! alike. A step's time is the device time between the backend's marks around its
//! launches ([`crate::Backend::mark`]: CUDA events on CUDA, the wall clock on the CPU), so
//! host work between steps (writing the inputs, reading the loss) is not in it. A side's
//! time is the median of its timed steps and its spread their quartiles. The ratio is the
//! median over rounds of each round's planned step over its unplanned step: two steps run
//! back to back see the same load, so a loaded machine disturbs the ratio far less than
//! it does either side's times, and one step stretched by a preemption moves nothing.
//!
//! A plan's predicted ratio ([`predicted_ratio`]) is its summary's: one step's cost plus
//! the recomputed steps' cost, over one step's cost. With the costs measured on the same
//! device ([`profile`], `sgc profile`) it predicts what [`compare`] measures.

use crate::backend::Backend;
use crate::error::ExecError;
use crate::executor::Executor;
use serde::Serialize;
use serde_json::{Map, Value};
use sgc_ir::{Graph, GraphError};
use sgc_plan_format::Plan;

/// How many steps to run untimed, then timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed steps of each executor before the first timed one.
    pub warmup: usize,
    /// Timed steps of each executor.
    pub steps: usize,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 2,
            steps: 10,
        }
    }
}

/// Device seconds of the timed steps of one executor, in the order they ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StepTimes {
    pub seconds: Vec<f64>,
}

impl StepTimes {
    /// The `q`-quantile (0 to 1) of the step times, interpolated between neighbours; 0
    /// when no step was timed.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut s = self.seconds.clone();
        s.sort_by(f64::total_cmp);
        match s.len() {
            0 => 0.0,
            n => {
                let x = q.clamp(0.0, 1.0) * (n - 1) as f64;
                let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
                s[lo] + (s[hi] - s[lo]) * (x - lo as f64)
            }
        }
    }

    pub fn median(&self) -> f64 {
        self.quantile(0.5)
    }

    /// The quartiles (25% and 75%): the spread reported beside the median.
    pub fn quartiles(&self) -> (f64, f64) {
        (self.quantile(0.25), self.quantile(0.75))
    }
}

/// One executor's measured steps: its loss after every step (warm-up included) and the
/// timed steps' device times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timed {
    pub losses: Vec<f32>,
    pub warmup: usize,
    pub times: StepTimes,
    /// Of the timed steps' device time, the share spent in recomputation steps.
    pub recompute_share: f64,
    /// How the device time was measured ([`Backend::CLOCK`]).
    pub clock: &'static str,
}

/// Planned and unplanned, warmed up and alternated ([`compare`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub planned: Timed,
    pub unplanned: Timed,
}

impl Comparison {
    /// Planned step time over unplanned: the median over rounds of the ratio of the two
    /// steps of a round (run back to back, so under the same load), which a loaded
    /// machine disturbs less than a ratio of medians.
    pub fn time_ratio(&self) -> f64 {
        let ratios = self
            .planned
            .times
            .seconds
            .iter()
            .zip(&self.unplanned.times.seconds)
            .map(|(p, u)| p / u.max(f64::MIN_POSITIVE))
            .collect();
        StepTimes { seconds: ratios }.median()
    }

    /// Whether both loss curves are the same bits.
    pub fn losses_bitwise_equal(&self) -> bool {
        let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        bits(&self.planned.losses) == bits(&self.unplanned.losses)
    }
}

/// An executor's warm-up losses, with its recompute seconds when timing starts.
fn warm<B: Backend>(
    ex: &mut Executor<B>,
    warmup: usize,
    progress: &mut impl FnMut(),
) -> Result<(Timed, f64), ExecError> {
    let mut losses = Vec::new();
    for _ in 0..warmup {
        one_step(ex, &mut losses)?;
        progress();
    }
    let timed = Timed {
        losses,
        warmup,
        times: StepTimes::default(),
        recompute_share: 0.0,
        clock: B::CLOCK,
    };
    Ok((timed, ex.recompute_seconds()))
}

/// `t`'s recompute share, from `ex`'s recompute seconds before the timed steps.
fn finish<B: Backend>(ex: &Executor<B>, mut t: Timed, recompute_before: f64) -> Timed {
    let total: f64 = t.times.seconds.iter().sum();
    t.recompute_share = (ex.recompute_seconds() - recompute_before) / total.max(f64::MIN_POSITIVE);
    t
}

/// Runs one step of `ex`; returns its device seconds. Its loss goes to `losses`.
fn one_step<B: Backend>(ex: &mut Executor<B>, losses: &mut Vec<f32>) -> Result<f64, ExecError> {
    losses.extend(ex.run(1)?);
    Ok(ex.step_seconds().last().copied().unwrap_or(0.0))
}

/// `options.warmup` untimed steps of `ex`, then `options.steps` timed ones (see the
/// [module docs](self)). `ex` must be bound; `progress` is called after every step.
pub fn measure<B: Backend>(
    ex: &mut Executor<B>,
    options: &TimingOptions,
    mut progress: impl FnMut(),
) -> Result<Timed, ExecError> {
    let (mut t, before) = warm(ex, options.warmup, &mut progress)?;
    for _ in 0..options.steps {
        t.times.seconds.push(one_step(ex, &mut t.losses)?);
        progress();
    }
    Ok(finish(ex, t, before))
}

/// Warms both executors up, then times them in alternation (see the [module docs](self)).
/// Both must be bound (the same seed makes their loss curves comparable); `progress` is
/// called after every step of either.
pub fn compare<B: Backend>(
    planned: &mut Executor<B>,
    unplanned: &mut Executor<B>,
    options: &TimingOptions,
    mut progress: impl FnMut(),
) -> Result<Comparison, ExecError> {
    let (mut p, p0) = warm(planned, options.warmup, &mut progress)?;
    let (mut u, u0) = warm(unplanned, options.warmup, &mut progress)?;
    for round in 0..options.steps {
        let order = [round % 2 == 0, round % 2 == 1];
        for planned_now in order {
            let (ex, t) = if planned_now {
                (&mut *planned, &mut p)
            } else {
                (&mut *unplanned, &mut u)
            };
            t.times.seconds.push(one_step(ex, &mut t.losses)?);
            progress();
        }
    }
    Ok(Comparison {
        planned: finish(planned, p, p0),
        unplanned: finish(unplanned, u, u0),
    })
}

/// The time ratio `plan` predicts, planned over unplanned: one step's cost plus its
/// recomputed steps' cost, over one step's cost (its costs are the graph's: measured
/// `time_us` after [`profile`], or flops, bytes or a roofline estimate otherwise; the
/// plan's `summary.cost_source` says which).
pub fn predicted_ratio(plan: &Plan) -> f64 {
    1.0 + plan.summary.recompute_share
}

/// Each op's device seconds in one step of `ex`: the median over `options.steps` steps
/// after `options.warmup` untimed ones, by op index (an op recomputed within a step counts
/// every run; an op that launches nothing, a view, 0). `ex` must be bound; `progress` is
/// called after every step.
pub fn profile<B: Backend>(
    ex: &mut Executor<B>,
    options: &TimingOptions,
    mut progress: impl FnMut(),
) -> Result<Vec<f64>, ExecError> {
    let (Timed { mut losses, .. }, _) = warm(ex, options.warmup, &mut progress)?;
    let n = ex.op_seconds().len();
    let mut samples = vec![StepTimes::default(); n];
    for _ in 0..options.steps {
        let before = ex.op_seconds().to_vec();
        one_step(ex, &mut losses)?;
        for (s, (after, before)) in samples.iter_mut().zip(ex.op_seconds().iter().zip(before)) {
            s.seconds.push(after - before);
        }
        progress();
    }
    Ok(samples.iter().map(StepTimes::median).collect())
}

/// The least `time_us` [`timed_graph`] writes: an op that launched nothing (a view)
/// still carries a positive time, one nanosecond.
pub const MIN_TIME_US: f64 = 1e-3;

/// How [`timed_graph`]'s times were measured, recorded as the graph's
/// `meta.time_us_source`.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The backend's name ([`Backend::name`]).
    pub device: String,
    /// [`Backend::CLOCK`].
    pub clock: &'static str,
    pub options: TimingOptions,
}

/// `graph` with every op's `time_us` replaced by `seconds[op]` ([`profile`]) in
/// microseconds (at least [`MIN_TIME_US`]) and `meta.time_us_source` saying how they
/// were measured.
pub fn timed_graph(graph: &Graph, seconds: &[f64], how: &Measured) -> Result<Graph, GraphError> {
    let mut def = graph.to_def();
    for (o, s) in def.ops.iter_mut().zip(seconds) {
        o.time_us = Some((s * 1e6).max(MIN_TIME_US));
    }
    let mut source = Map::new();
    source.insert("method".into(), "measured".into());
    source.insert("device".into(), how.device.clone().into());
    source.insert("clock".into(), how.clock.into());
    source.insert("statistic".into(), "median per op of one step".into());
    source.insert("warmup_steps".into(), how.options.warmup.into());
    source.insert("timed_steps".into(), how.options.steps.into());
    def.meta
        .get_or_insert_with(Map::new)
        .insert("time_us_source".into(), Value::Object(source));
    Graph::from_def(def)
}
