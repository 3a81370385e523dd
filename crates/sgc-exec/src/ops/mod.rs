//! The op families: each module owns its ops' kernels — the kernel enum, the parsing of
//! its op kinds' attributes (the builder's and the exporter's `aten.*`/`sgc.*` kinds),
//! the operand checks — and the CPU and CUDA backends each have a module of the same name
//! (`cpu_backend/<family>.rs`, `cuda_backend/<family>.rs` with `kernels/<family>.cu`) that
//! runs them. [`crate::kernel::Kernel`] only routes to the family.
//!
//! A family module has: `KINDS`, the op kinds it runs with whether CUDA runs them (the
//! union over families is [`crate::kernel::kernels`]); `parse`, the kernel of one of its
//! kinds (`None` for a kind it does not claim); and its enum, implementing [`Family`].
//! Adding an op takes its line in `sgc_ir::ops` and these family files.

/// A family's `KINDS`, the op kinds it runs and whether CUDA runs them: `cuda:` the kinds
/// both backends run, `cpu:` those only the CPU backend runs (`sgc_ir::ops::OpKind` names).
macro_rules! kinds {
    (cuda: $($cuda:ident)*; cpu: $($cpu:ident)*;) => {
        /// The op kinds of the family, and whether CUDA runs them.
        pub const KINDS: &[(sgc_ir::ops::OpKind, bool)] = &[
            $((sgc_ir::ops::OpKind::$cuda, true),)*
            $((sgc_ir::ops::OpKind::$cpu, false),)*
        ];
    };
}

pub mod attention;
pub(crate) mod check;
pub mod conv;
pub mod elementwise;
pub mod embedding;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod norm;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod shape;

use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use serde_json::{Map, Value};
use sgc_ir::{DType, Graph, Op};

/// What an input slot of a kernel holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Float data (f32, f64, or f16/bf16 computed in f32).
    Data,
    /// i64 or i32 indices.
    Index,
    /// A bool mask.
    Mask,
    /// Any dtype the backend holds (a cast's input).
    Any,
}

/// What every family answers about one of its kernels.
pub trait Family {
    /// Number of (inputs, outputs); `None` inputs for a variadic kernel, [`VARIADIC`]
    /// outputs for one that has as many as its op.
    fn arity(&self) -> (Option<usize>, usize);

    /// What input slot `i` holds.
    fn input(&self, _i: usize) -> Slot {
        Slot::Data
    }

    /// The dtype of output slot `i`.
    fn output_dtype(&self, _i: usize) -> DType {
        DType::F32
    }

    /// The integer dtypes its data operands (data input slots, outputs of dtype f32) may
    /// have besides floats, all of them alike (byte copies, integer counters, integer
    /// arithmetic); empty: floats only.
    fn ints(&self) -> &'static [DType] {
        &[]
    }

    /// Checks the operand shapes (their counts and dtypes are checked already).
    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError>;
}

/// Outputs of a kernel that takes as many as the op has (`split`, `unbind`).
pub const VARIADIC: usize = usize::MAX;

/// One op being parsed: the graph around it and its attributes.
pub(crate) struct Cx<'a> {
    pub graph: &'a Graph,
    pub op: &'a Op,
    pub a: Attrs<'a>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(graph: &'a Graph, op: &'a Op) -> Self {
        Cx {
            graph,
            op,
            a: Attrs {
                op: &op.name,
                op_type: &op.op_type,
                map: op.attrs.as_ref(),
            },
        }
    }

    /// Number of inputs.
    pub(crate) fn inputs(&self) -> usize {
        self.op.inputs.len()
    }

    /// Rank of input `i` (0 if absent).
    pub(crate) fn rank(&self, i: usize) -> usize {
        self.shape(i).map_or(0, |s| s.len())
    }

    /// Shape of input `i`.
    pub(crate) fn shape(&self, i: usize) -> Option<&'a [u64]> {
        let g = self.graph;
        self.op.inputs.get(i).map(|&t| g.tensor(t).shape.as_slice())
    }

    /// Rank of output `i` (0 if absent).
    pub(crate) fn output_rank(&self, i: usize) -> usize {
        let g = self.graph;
        self.op
            .outputs
            .get(i)
            .map_or(0, |&t| g.tensor(t).shape.len())
    }

    /// The dtype of output `i` (f32 if absent).
    pub(crate) fn output_dtype(&self, i: usize) -> DType {
        let g = self.graph;
        self.op
            .outputs
            .get(i)
            .map_or(DType::F32, |&t| g.tensor(t).dtype)
    }

    /// Whether input `i` is a bool tensor.
    pub(crate) fn is_bool(&self, i: usize) -> bool {
        self.op
            .inputs
            .get(i)
            .is_some_and(|&t| self.graph.tensor(t).dtype == DType::Bool)
    }
}

/// Reads attributes of one op, with errors naming it.
pub(crate) struct Attrs<'a> {
    op: &'a str,
    op_type: &'a str,
    map: Option<&'a Map<String, Value>>,
}

impl Attrs<'_> {
    pub(crate) fn err(&self, detail: String) -> ExecError {
        ExecError::BadAttr {
            op: self.op.to_string(),
            op_type: self.op_type.to_string(),
            detail,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.map.and_then(|m| m.get(key))
    }

    pub(crate) fn usize(&self, key: &str) -> Result<usize, ExecError> {
        self.get(key)
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.err(format!("`{key}` must be a non-negative integer")))
    }

    /// A number attribute as written (`default` when absent), finite also in f32, the
    /// narrowest type a kernel rounds it to.
    pub(crate) fn f64_or(&self, key: &str, default: Option<f64>) -> Result<f64, ExecError> {
        match self.get(key) {
            Some(v) => v.as_f64(),
            None => default,
        }
        .filter(|f| (*f as f32).is_finite())
        .ok_or_else(|| self.err(format!("`{key}` must be a finite number")))
    }

    /// An optional attribute: `default` when absent, else `read` of it (`must` says what
    /// it must be when that fails).
    fn opt<T>(
        &self,
        key: &str,
        default: T,
        read: impl Fn(&Value) -> Option<T>,
        must: &str,
    ) -> Result<T, ExecError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => read(v).ok_or_else(|| self.err(format!("`{key}` must be {must}"))),
        }
    }

    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool, ExecError> {
        self.opt(key, default, Value::as_bool, "true or false")
    }

    pub(crate) fn perm(&self) -> Result<Vec<usize>, ExecError> {
        let arr = self.get("perm").and_then(Value::as_array);
        let perm: Option<Vec<usize>> = arr.and_then(|a| {
            a.iter()
                .map(|v| v.as_u64().and_then(|u| usize::try_from(u).ok()))
                .collect()
        });
        perm.ok_or_else(|| self.err("`perm` must be an array of axes".to_string()))
    }

    /// A square 2-d attribute: `[a, a]` or `a`.
    pub(crate) fn square(&self, key: &str) -> Result<usize, ExecError> {
        let bad = || {
            self.err(format!(
                "`{key}` must be one size or two equal sizes (only square windows run)"
            ))
        };
        match self.get(key) {
            Some(Value::Array(v)) => {
                let xs: Vec<u64> = v.iter().filter_map(Value::as_u64).collect();
                match xs.as_slice() {
                    [a] => Ok(*a as usize),
                    [a, b] if a == b => Ok(*a as usize),
                    _ => Err(bad()),
                }
            }
            Some(v) => v.as_u64().map(|a| a as usize).ok_or_else(bad),
            None => Err(bad()),
        }
    }

    /// A 2-d attribute `[a, b]` (or one size `a` for both), as `[rows, columns]`.
    pub(crate) fn pair(&self, key: &str) -> Result<[usize; 2], ExecError> {
        let sizes: Option<Vec<usize>> = match self.get(key) {
            Some(Value::Array(v)) => v.iter().map(|x| x.as_u64().map(|u| u as usize)).collect(),
            Some(v) => v.as_u64().map(|a| vec![a as usize]),
            None => None,
        };
        match sizes.as_deref() {
            Some(&[a]) => Ok([a, a]),
            Some(&[a, b]) => Ok([a, b]),
            _ => Err(self.err(format!("`{key}` must be one or two sizes"))),
        }
    }

    pub(crate) fn square_or(&self, key: &str, default: usize) -> Result<usize, ExecError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Array(v)) if v.is_empty() => Ok(default),
            Some(_) => self.square(key),
        }
    }

    /// `output_mask` (absent: all three results).
    pub(crate) fn mask(&self) -> Result<[bool; 3], ExecError> {
        match self.get("output_mask") {
            None => Ok([true; 3]),
            Some(v) => {
                let m: Vec<bool> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_bool).collect())
                    .unwrap_or_default();
                <[bool; 3]>::try_from(m)
                    .map_err(|_| self.err("`output_mask` must be three booleans".into()))
            }
        }
    }

    pub(crate) fn f64_of(&self, key: &str) -> Result<f64, ExecError> {
        self.get(key)
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite())
            .ok_or_else(|| self.err(format!("`{key}` must be a finite number")))
    }

    /// A number attribute that may be non-finite: a JSON number, or ATen's `inf`, `-inf`
    /// and `nan` written as text (`scalar_tensor`'s `s`, a pad's `value`); `default` when
    /// absent.
    pub(crate) fn scalar_or(&self, key: &str, default: Option<f64>) -> Result<f64, ExecError> {
        match self.get(key) {
            Some(Value::String(t)) => t.parse::<f64>().ok(),
            Some(v) => v.as_f64(),
            None => default,
        }
        .ok_or_else(|| self.err(format!("`{key}` must be a number")))
    }

    /// A list attribute of integers (`[]` when absent).
    pub(crate) fn ints(&self, key: &str) -> Result<Vec<i64>, ExecError> {
        let read =
            |v: &Value| -> Option<Vec<i64>> { v.as_array()?.iter().map(Value::as_i64).collect() };
        self.opt(key, Vec::new(), read, "a list of integers")
    }

    pub(crate) fn i64_or(&self, key: &str, default: i64) -> Result<i64, ExecError> {
        self.opt(key, default, Value::as_i64, "an integer")
    }

    /// Refuses an attribute whose value is not `expected` (a feature the kernel lacks).
    pub(crate) fn require(
        &self,
        key: &str,
        ok: impl Fn(&Value) -> bool,
        what: &str,
    ) -> Result<(), ExecError> {
        match self.get(key) {
            Some(v) if !ok(v) => Err(self.err(format!("`{key}` = {v}: only {what} runs"))),
            _ => Ok(()),
        }
    }

    /// An axis attribute of a rank-`rank` operand (negative counts from the end).
    pub(crate) fn axis_of(&self, key: &str, rank: usize) -> Result<usize, ExecError> {
        let d = self.i64_or(key, 0)?;
        sgc_ir::ops::axis(d, rank)
            .ok_or_else(|| self.err(format!("`{key}` is not an axis of a rank-{rank} operand")))
    }

    /// `dim` as an axis of a rank-`rank` operand, refused unless it is the last one.
    pub(crate) fn last_axis(&self, rank: usize) -> Result<(), ExecError> {
        if self.axis_of("dim", rank)? + 1 != rank {
            return Err(self.err("`dim`: only the last axis runs".into()));
        }
        Ok(())
    }

    /// Refuses a `dilation` other than 1.
    pub(crate) fn unit_dilation(&self) -> Result<(), ExecError> {
        let ones = |v: &Value| {
            v.as_array()
                .is_some_and(|d| d.iter().all(|x| x.as_u64() == Some(1)))
        };
        self.require("dilation", ones, "dilation 1")
    }

    /// Refuses a boolean `key` that is not `want`.
    pub(crate) fn flag(&self, key: &str, want: bool, what: &str) -> Result<(), ExecError> {
        self.require(key, |v| v.as_bool() == Some(want), what)
    }

    /// Refuses a numeric `key` that is not `want`.
    pub(crate) fn number(&self, key: &str, want: f64) -> Result<(), ExecError> {
        let what = format!("{key} = {want}");
        self.require(key, |v| v.as_f64() == Some(want), &what)
    }

    /// `(kernel, stride, padding)` of the builder's window ops.
    pub(crate) fn window(&self) -> Result<(usize, usize, usize), ExecError> {
        Ok((
            self.usize("kernel")?,
            self.usize("stride")?,
            self.usize("padding")?,
        ))
    }
}

/// A seed from an op's name (FNV-1a): the same op draws the same stream in every run.
pub(crate) fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
