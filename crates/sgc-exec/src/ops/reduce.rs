//! Reductions: the exporter's `sum` and `mean` over adjacent axes.

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

/// Sum (or mean) over the contiguous axes `start..end`, accumulated in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    pub start: usize,
    pub end: usize,
    pub mean: bool,
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Reduce>, ExecError> {
    if !matches!(kind, OpKind::AtenSum | OpKind::AtenMean) {
        return Ok(None);
    }
    let (a, r) = (&cx.a, cx.rank(0));
    let dims: Vec<usize> = match a.get("dim") {
        None | Some(Value::Null) => (0..r).collect(),
        Some(Value::Array(v)) => v
            .iter()
            .map(|d| d.as_i64().and_then(|d| sgc_ir::ops::axis(d, r)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| a.err("`dim` must list axes of the operand".into()))?,
        Some(_) => return Err(a.err("`dim` must be a list of axes".into())),
    };
    let (start, end) = (
        dims.iter().copied().min().unwrap_or(0),
        dims.iter().copied().max().map_or(0, |m| m + 1),
    );
    if end - start != dims.len()
        || (end > start
            && dims.iter().collect::<std::collections::BTreeSet<_>>().len() != dims.len())
    {
        return Err(a.err(format!(
            "`dim` = {dims:?}: only a reduction over adjacent axes runs"
        )));
    }
    Ok(Some(Reduce {
        start,
        end,
        mean: kind == OpKind::AtenMean,
    }))
}

impl Family for Reduce {
    fn arity(&self) -> (Option<usize>, usize) {
        (Some(1), 1)
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let Reduce { start, end, .. } = self;
        let (x, y) = (ins[0].shape.as_slice(), outs[0].shape.as_slice());
        expect(start <= end && *end <= x.len(), || {
            format!("axes {start}..{end} of {x:?}")
        })?;
        let kept: usize = x[..*start].iter().chain(&x[*end..]).product();
        expect(y.iter().product::<usize>() == kept, || {
            format!("output {y:?} of a reduction of {x:?} over axes {start}..{end}")
        })
    }
}
