//! Reductions: `sum` and `mean` over any set of axes (`dim`: a list, negative axes counted
//! from the end, none or empty: all), `keepdim` either way (the output's shape says which).
//! Adjacent axes run on both backends; others on the CPU, which moves the kept axes first.

use super::check::expect;
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: AtenSum AtenMean;
    cpu: ;
}

/// Sum (or mean) over `axes`, accumulated in f64; `start..end` spans them (equal to them
/// when they are adjacent).
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    pub start: usize,
    pub end: usize,
    /// The reduced axes, ascending, without repeats.
    pub axes: Vec<usize>,
    pub mean: bool,
    /// The operand's rank (the kept axes are the others).
    pub rank: usize,
}

impl Reduce {
    /// Whether the reduced axes are one contiguous run (`start..end`).
    pub fn adjacent(&self) -> bool {
        self.end - self.start == self.axes.len()
    }
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Reduce>, ExecError> {
    if !matches!(kind, OpKind::AtenSum | OpKind::AtenMean) {
        return Ok(None);
    }
    let (a, r) = (&cx.a, cx.rank(0));
    // ATen's rules: no `dim`, or an empty list, reduces every axis; a scalar (rank 0) takes
    // `dim` 0 or -1 as its one element, a reduction over nothing.
    let dims: Vec<usize> = match a.get("dim") {
        None | Some(Value::Null) => (0..r).collect(),
        Some(Value::Array(v)) if v.is_empty() => (0..r).collect(),
        Some(Value::Array(v)) if r == 0 && v.iter().all(|d| matches!(d.as_i64(), Some(0 | -1))) => {
            Vec::new()
        }
        Some(Value::Array(v)) => v
            .iter()
            .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, r)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| a.err("`dim` must list axes of the operand".into()))?,
        Some(_) => return Err(a.err("`dim` must be a list of axes".into())),
    };
    let mut axes = dims.clone();
    axes.sort_unstable();
    axes.dedup();
    if axes.len() != dims.len() {
        return Err(a.err(format!("`dim` = {dims:?} names an axis twice")));
    }
    let (start, end) = (
        axes.first().copied().unwrap_or(0),
        axes.last().map_or(0, |m| m + 1),
    );
    Ok(Some(Reduce {
        start,
        end,
        axes,
        mean: kind == OpKind::AtenMean,
        rank: r,
    }))
}

impl Family for Reduce {
    fn arity(&self) -> (Option<usize>, usize) {
        (Some(1), 1)
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let (x, y) = (ins[0].shape.as_slice(), outs[0].shape.as_slice());
        let axes = &self.axes;
        expect(axes.iter().all(|&a| a < x.len()), || {
            format!("axes {axes:?} of {x:?}")
        })?;
        let kept: usize = (0..x.len())
            .filter(|a| !axes.contains(a))
            .map(|a| x[a])
            .product();
        expect(y.iter().product::<usize>() == kept, || {
            format!("output {y:?} of a reduction of {x:?} over axes {axes:?}")
        })
    }
}
