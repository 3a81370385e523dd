//! Op costs: the format's rule, and an opt-in roofline estimate for a device.
//!
//! # The default
//! The format doc fixes an op's cost: `time_us`, else `flops`, else the bytes it reads plus
//! the bytes it writes ([`Graph::op_cost`]). Reports say which source they used.
//!
//! # Why an estimate
//! Traced graphs write `flops: 0` for memory-bound ops (elementwise ops, normalisations,
//! copies), so by the default rule recomputing them looks free, while on a GPU they take
//! as long as the bytes they move. A roofline model gives every op a time from what the
//! graph already says (its flops, its tensors' sizes and dtypes) and three numbers of a
//! device ([`DeviceProfile`]): peak f32 and half-precision arithmetic rates and memory
//! bandwidth. It is opt-in: [`Graph::op_cost_with`] with a profile, `PlanOptions::
//! device_profile` in the planner, `--device-profile` on the command line.
//!
//! # The method
//! For an op without `time_us`, on a profile:
//! - `logical(t)`: the tensor's `bytes` if given, else `product(shape) * size_of(dtype)`,
//!   for every tensor, views included (a view's own logical size, not its base's; this is
//!   [`crate::Tensor::size`]);
//! - bytes moved: 0 for a *view op* (at least one output, every output an `alias_of`
//!   view); otherwise the sum of `logical` over the op's *distinct* input tensors plus the
//!   sum of `logical` over its outputs (summed exactly in integers, then one rounding to
//!   f64);
//! - rate: the half-precision rate when the op's first output (with no outputs, its first
//!   input) is `f16` or `bf16`, else the f32 rate; an op with no inputs and no outputs
//!   takes 0;
//! - `time_us = max(flops / (TFLOP/s * 1e12), bytes_moved / (GB/s * 1e9)) * 1e6` in f64
//!   (missing flops come from the op vocabulary's formula for the op kind, else count as 0;
//!   GB = 1e9 bytes).
//!
//! An op that has `time_us` keeps it. The Python exporter (`python/`) writes these estimates
//! into the graphs it exports, through the native module (`sgc.roofline`). [`Roofline`] keeps both terms,
//! so reports can tell memory-bound ops (the bytes term is the larger) from compute-bound
//! ones. [`with_estimated_times`] writes the estimates into a graph and records the method
//! and rates in `meta.time_us_source` ([`DeviceProfile::time_us_source`]), as the exporter
//! does when it stores estimates.

use crate::error::GraphError;
use crate::graph::{CostSource, Graph};

// Costs on a device profile, beside the graph's own (the graph module knows no profiles).
impl CostSource {
    /// The source for reports: [`Self::as_str`], with the profile's name after a roofline
    /// estimate (`roofline estimate (a100)`).
    pub fn describe(self, device: Option<&DeviceProfile>) -> String {
        match (self, device) {
            (CostSource::Roofline, Some(d)) => format!("{} ({})", self.as_str(), d.name()),
            _ => self.as_str().to_string(),
        }
    }
}

impl Graph {
    /// Cost of one op on a device: with a profile, `time_us`, else the profile's roofline
    /// estimate ([`crate::cost`]); without one, [`Graph::op_cost`].
    pub fn op_cost_with(&self, op: OpId, device: Option<&DeviceProfile>) -> (f64, CostSource) {
        match device {
            Some(d) if self.op(op).time_us.is_none() => {
                (Roofline::of(self, op, d).time_us(), CostSource::Roofline)
            }
            _ => self.op_cost(op),
        }
    }
}
use crate::ids::{DType, OpId, TensorId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Dense peak rates of the named profiles: (name, TFLOP/s f32, TFLOP/s f16/bf16, GB/s).
const NAMED: [(&str, f64, f64, f64); 6] = [
    ("v100", 15.7, 125.0, 900.0),
    ("t4", 8.1, 65.0, 320.0),
    ("a100", 19.5, 312.0, 2039.0),
    ("l4", 30.3, 121.0, 300.0),
    ("h100", 67.0, 989.0, 3350.0),
    ("rtx4090", 82.6, 165.2, 1008.0),
];

/// The `meta.time_us_source.method` of roofline estimates.
pub const ROOFLINE_METHOD: &str = "roofline";

/// Why a device profile string or object was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ProfileError {
    #[error("unknown device profile {given:?}: use one of {}, or custom rates F32/HALF/GBPS (TFLOP/s f32, TFLOP/s f16/bf16, GB/s), e.g. 19.5/312/2039", named_list())]
    Unknown { given: String },
    #[error("device profile {given:?}: {why}; custom rates are F32/HALF/GBPS (TFLOP/s f32, TFLOP/s f16/bf16, GB/s), e.g. 19.5/312/2039, or one of {}", named_list())]
    BadRates { given: String, why: String },
}

fn named_list() -> String {
    NAMED.map(|n| n.0).join(", ")
}

/// A device's peak dense arithmetic rates and memory bandwidth, for roofline estimates.
///
/// On the command line a profile is a name (`a100`) or custom rates `F32/HALF/GBPS`
/// ([`FromStr`]); in plan files an object with the name and the three rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ProfileFields")]
pub struct DeviceProfile {
    name: String,
    f32_tflops: f64,
    half_tflops: f64,
    bandwidth_gbps: f64,
}

/// A profile as stored, before its rates are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFields {
    name: String,
    f32_tflops: f64,
    half_tflops: f64,
    bandwidth_gbps: f64,
}

impl TryFrom<ProfileFields> for DeviceProfile {
    type Error = ProfileError;
    fn try_from(f: ProfileFields) -> Result<Self, ProfileError> {
        DeviceProfile::new(f.name, f.f32_tflops, f.half_tflops, f.bandwidth_gbps)
    }
}

impl DeviceProfile {
    /// A profile from its name and rates (TFLOP/s f32, TFLOP/s half, GB/s); every rate must be
    /// a finite number > 0.
    pub fn new(
        name: impl Into<String>,
        f32_tflops: f64,
        half_tflops: f64,
        bandwidth_gbps: f64,
    ) -> Result<Self, ProfileError> {
        let name = name.into();
        for (what, x) in [
            ("the f32 rate", f32_tflops),
            ("the half-precision rate", half_tflops),
            ("the bandwidth", bandwidth_gbps),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(ProfileError::BadRates {
                    given: name,
                    why: format!("{what} is {x}, not a finite number > 0"),
                });
            }
        }
        Ok(DeviceProfile {
            name,
            f32_tflops,
            half_tflops,
            bandwidth_gbps,
        })
    }

    /// Custom rates, named `F32/HALF/GBPS` as written by [`fmt::Display`] of the numbers.
    pub fn custom(f32_tflops: f64, half_tflops: f64, gbps: f64) -> Result<Self, ProfileError> {
        let name = format!("{f32_tflops}/{half_tflops}/{gbps}");
        DeviceProfile::new(name, f32_tflops, half_tflops, gbps)
    }

    /// Every named profile, in a fixed order.
    pub fn named() -> Vec<DeviceProfile> {
        NAMED
            .iter()
            .map(|&(name, f, h, b)| DeviceProfile {
                name: name.to_string(),
                f32_tflops: f,
                half_tflops: h,
                bandwidth_gbps: b,
            })
            .collect()
    }

    /// The named profile `name` (any case).
    pub fn by_name(name: &str) -> Option<DeviceProfile> {
        let lower = name.to_ascii_lowercase();
        Self::named().into_iter().find(|p| p.name == lower)
    }

    /// The name: a named profile's, or `F32/HALF/GBPS` for custom rates.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Peak dense f32 rate, TFLOP/s.
    pub fn f32_tflops(&self) -> f64 {
        self.f32_tflops
    }
    /// Peak dense f16/bf16 rate, TFLOP/s.
    pub fn half_tflops(&self) -> f64 {
        self.half_tflops
    }
    /// Memory bandwidth, GB/s (1e9 bytes per second).
    pub fn bandwidth_gbps(&self) -> f64 {
        self.bandwidth_gbps
    }

    /// Peak FLOP/s for ops whose precision is half (`f16`, `bf16`) or not.
    pub fn peak_flops_per_s(&self, half: bool) -> f64 {
        let tflops = if half {
            self.half_tflops
        } else {
            self.f32_tflops
        };
        tflops * 1e12
    }

    /// Bytes per second.
    pub fn bandwidth_bytes_per_s(&self) -> f64 {
        self.bandwidth_gbps * 1e9
    }

    /// The `meta.time_us_source` object of a graph whose `time_us` are this profile's
    /// roofline estimates.
    pub fn time_us_source(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("method".into(), ROOFLINE_METHOD.into());
        m.insert("device_profile".into(), self.name.clone().into());
        m.insert("f32_tflops".into(), self.f32_tflops.into());
        m.insert("half_tflops".into(), self.half_tflops.into());
        m.insert("bandwidth_gbps".into(), self.bandwidth_gbps.into());
        m
    }
}

impl fmt::Display for DeviceProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl FromStr for DeviceProfile {
    type Err = ProfileError;

    /// A named profile (`a100`) or custom rates `F32/HALF/GBPS` (`19.5/312/2039`).
    fn from_str(s: &str) -> Result<Self, ProfileError> {
        let s = s.trim();
        if let Some(p) = DeviceProfile::by_name(s) {
            return Ok(p);
        }
        if !s.contains('/') {
            return Err(ProfileError::Unknown {
                given: s.to_string(),
            });
        }
        let bad = |why: String| ProfileError::BadRates {
            given: s.to_string(),
            why,
        };
        let parts: Vec<&str> = s.split('/').map(str::trim).collect();
        let [f, h, b] = parts[..] else {
            return Err(bad(format!("{} numbers where 3 are needed", parts.len())));
        };
        let num = |x: &str| {
            x.parse::<f64>()
                .map_err(|_| bad(format!("{x:?} is not a number")))
        };
        DeviceProfile::custom(num(f)?, num(h)?, num(b)?).map_err(|e| match e {
            ProfileError::BadRates { why, .. } => bad(why),
            other => other,
        })
    }
}

/// The two terms of one op's roofline estimate on one device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// `flops / peak FLOP/s`, seconds.
    pub compute_s: f64,
    /// `bytes_moved / bandwidth`, seconds.
    pub memory_s: f64,
    /// Bytes read and written (0 for a view op).
    pub bytes_moved: u128,
}

impl Roofline {
    /// The estimate of `op` on `device` from its flops and tensors (ignores `time_us`).
    pub fn of(graph: &Graph, op: OpId, device: &DeviceProfile) -> Roofline {
        let o = graph.op(op);
        let Some(&first) = o.outputs.first().or(o.inputs.first()) else {
            return Roofline {
                compute_s: 0.0,
                memory_s: 0.0,
                bytes_moved: 0,
            };
        };
        let half = matches!(graph.tensor(first).dtype, DType::F16 | DType::Bf16);
        let bytes_moved = bytes_moved(graph, op);
        Roofline {
            compute_s: o
                .flops
                .or_else(|| estimated_flops(graph, op))
                .unwrap_or(0.0)
                / device.peak_flops_per_s(half),
            memory_s: bytes_moved as f64 / device.bandwidth_bytes_per_s(),
            bytes_moved,
        }
    }

    /// `max(compute, memory)` in microseconds.
    pub fn time_us(&self) -> f64 {
        self.compute_s.max(self.memory_s) * 1e6
    }

    /// Whether moving bytes takes longer than the arithmetic.
    pub fn memory_bound(&self) -> bool {
        self.memory_s > self.compute_s
    }
}

/// The op vocabulary's flop count for `op` from its shapes ([`crate::ops::Flops`]), when
/// its kind has a formula; the roofline uses it for ops whose file gives no `flops`.
pub fn estimated_flops(graph: &Graph, op: OpId) -> Option<f64> {
    let o = graph.op(op);
    let shape = |t: &TensorId| graph.tensor(*t).shape.as_slice();
    let ins: Vec<&[u64]> = o.inputs.iter().map(shape).collect();
    let outs: Vec<&[u64]> = o.outputs.iter().map(shape).collect();
    o.kind?.spec().flops.count(&ins, &outs, o.attrs.as_ref())
}

/// Logical bytes of a tensor: `bytes` if given, else `product(shape) * size_of(dtype)`.
pub fn logical_bytes(graph: &Graph, t: TensorId) -> u64 {
    graph.tensor(t).size
}

/// Bytes an op moves: 0 for a view op, else its distinct inputs plus its outputs.
pub fn bytes_moved(graph: &Graph, op: OpId) -> u128 {
    let o = graph.op(op);
    let is_view = |t: &TensorId| graph.tensor(*t).alias_of.is_some();
    if !o.outputs.is_empty() && o.outputs.iter().all(is_view) {
        return 0;
    }
    let mut inputs = o.inputs.clone();
    inputs.sort_unstable();
    inputs.dedup();
    inputs
        .iter()
        .chain(&o.outputs)
        .map(|&t| u128::from(logical_bytes(graph, t)))
        .sum()
}

/// The graph with `time_us` set to `device`'s roofline estimate on every op that lacks it,
/// and how many ops that was. When there is at least one, `meta.time_us_source` records
/// the method and the rates ([`DeviceProfile::time_us_source`]).
pub fn with_estimated_times(
    graph: &Graph,
    device: &DeviceProfile,
) -> Result<(Graph, usize), GraphError> {
    let mut def = graph.to_def();
    let mut estimated = 0;
    for (i, o) in def.ops.iter_mut().enumerate() {
        if o.time_us.is_none() {
            o.time_us = Some(Roofline::of(graph, OpId::new(i), device).time_us());
            estimated += 1;
        }
    }
    if estimated > 0 {
        let meta = def.meta.get_or_insert_with(Map::new);
        meta.insert(
            "time_us_source".into(),
            Value::Object(device.time_us_source()),
        );
    }
    Ok((Graph::from_def(def)?, estimated))
}

/// What the estimates of one graph on one device add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EstimateSummary {
    /// Ops without `time_us`, which the profile estimates.
    pub estimated_ops: usize,
    /// Their estimated time, microseconds.
    pub estimated_time_us: f64,
    /// Estimated ops whose bytes term is larger than their flops term.
    pub memory_bound_ops: usize,
    /// Their estimated time, microseconds.
    pub memory_bound_time_us: f64,
}

impl EstimateSummary {
    /// The estimates of every op without `time_us` in `graph` on `device`.
    pub fn of(graph: &Graph, device: &DeviceProfile) -> EstimateSummary {
        let mut s = EstimateSummary::default();
        for op in graph.op_ids().filter(|&o| graph.op(o).time_us.is_none()) {
            let r = Roofline::of(graph, op, device);
            s.estimated_ops += 1;
            s.estimated_time_us += r.time_us();
            if r.memory_bound() {
                s.memory_bound_ops += 1;
                s.memory_bound_time_us += r.time_us();
            }
        }
        s
    }

    /// The share of estimated time spent in memory-bound ops (0 when nothing is estimated).
    pub fn memory_bound_share(&self) -> f64 {
        if self.estimated_time_us > 0.0 {
            self.memory_bound_time_us / self.estimated_time_us
        } else {
            0.0
        }
    }
}

/// Which cost sources a set of op costs came from, described for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostSources {
    seen: [bool; 4],
}

impl CostSources {
    fn slot(s: CostSource) -> usize {
        match s {
            CostSource::TimeUs => 0,
            CostSource::Flops => 1,
            CostSource::Bytes => 2,
            CostSource::Roofline => 3,
        }
    }

    pub fn insert(&mut self, s: CostSource) {
        self.seen[Self::slot(s)] = true;
    }

    pub fn contains(&self, s: CostSource) -> bool {
        self.seen[Self::slot(s)]
    }

    /// `none`, the one source (`time_us`, `flops`, `bytes moved`, `roofline estimate
    /// (a100)`), `time_us and roofline estimate (a100)` (both in microseconds), else
    /// `mixed` (units that do not add up).
    pub fn describe(&self, device: Option<&DeviceProfile>) -> String {
        let all = [
            CostSource::TimeUs,
            CostSource::Flops,
            CostSource::Bytes,
            CostSource::Roofline,
        ];
        let seen: Vec<CostSource> = all.into_iter().filter(|&s| self.contains(s)).collect();
        match seen[..] {
            [] => "none".to_string(),
            [one] => one.describe(device),
            [CostSource::TimeUs, CostSource::Roofline] => format!(
                "{} and {}",
                CostSource::TimeUs.describe(device),
                CostSource::Roofline.describe(device)
            ),
            _ => "mixed".to_string(),
        }
    }
}

impl FromIterator<CostSource> for CostSources {
    fn from_iter<I: IntoIterator<Item = CostSource>>(iter: I) -> Self {
        let mut s = CostSources::default();
        for x in iter {
            s.insert(x);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_parse_in_any_case_and_carry_their_rates() {
        let a100: DeviceProfile = "A100".parse().unwrap();
        assert_eq!(a100.name(), "a100");
        assert_eq!(
            (a100.f32_tflops(), a100.half_tflops(), a100.bandwidth_gbps()),
            (19.5, 312.0, 2039.0)
        );
        assert_eq!(a100.peak_flops_per_s(true), 312e12);
        assert_eq!(a100.bandwidth_bytes_per_s(), 2039e9);
        let names: Vec<String> = DeviceProfile::named()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        assert_eq!(names, ["v100", "t4", "a100", "l4", "h100", "rtx4090"]);
        for p in DeviceProfile::named() {
            assert_eq!(p.name().parse::<DeviceProfile>().unwrap(), p);
        }
    }

    #[test]
    fn custom_rates_parse_and_bad_strings_list_the_valid_names() {
        let p: DeviceProfile = "19.5/312/2039".parse().unwrap();
        assert_eq!(p.name(), "19.5/312/2039");
        assert_eq!(p.half_tflops(), 312.0);
        assert_eq!(p.to_string().parse::<DeviceProfile>().unwrap(), p);
        for bad in [
            "a200", "", "1/2", "1/2/3/4", "1/x/3", "0/1/1", "1/1/-5", "1/inf/1",
        ] {
            let e = bad.parse::<DeviceProfile>().expect_err(bad).to_string();
            assert!(
                e.contains("v100, t4, a100, l4, h100, rtx4090"),
                "{bad}: {e}"
            );
            assert!(e.contains("F32/HALF/GBPS"), "{bad}: {e}");
        }
    }

    #[test]
    fn profiles_round_trip_through_serde_and_bad_rates_are_refused() {
        let p: DeviceProfile = "h100".parse().unwrap();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<DeviceProfile>(&text).unwrap(), p);
        let zero = r#"{"name": "x", "f32_tflops": 1, "half_tflops": 0, "bandwidth_gbps": 1}"#;
        let e = serde_json::from_str::<DeviceProfile>(zero).unwrap_err();
        assert!(e.to_string().contains("half-precision rate"), "{e}");
    }

    #[test]
    fn the_meta_records_method_and_rates() {
        let p: DeviceProfile = "a100".parse().unwrap();
        let meta = Value::Object(p.time_us_source());
        assert_eq!(
            meta.to_string(),
            r#"{"method":"roofline","device_profile":"a100","f32_tflops":19.5,"half_tflops":312.0,"bandwidth_gbps":2039.0}"#
        );
    }
}
