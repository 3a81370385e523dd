//! 2-d convolutions over `[N, C, H, W]`: the builder's `conv2d` and its gradients, and the
//! exporter's `convolution` (groups, bias) and `convolution_backward`.

use super::check::{eq, expect, masked, window_out};
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use crate::window::Window;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: Conv2d Conv2dGradInput Conv2dGradWeight AtenConvolution AtenConvolutionBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Conv {
    /// `x [N, C, H, W]`, `w [O, C, kh, kw]` -> `[N, O, Ho, Wo]`.
    Conv2d { stride: usize, padding: usize },
    /// `(dy, w) -> dx`.
    Conv2dGradInput { stride: usize, padding: usize },
    /// `(x, dy) -> dw`.
    Conv2dGradWeight { stride: usize, padding: usize },
    /// `aten.convolution` with groups or a bias: `(x, w[, bias])`, `w [O, C/groups, kh, kw]`.
    ConvGrouped {
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    },
    /// `aten.convolution_backward`: `(dy, x, w)` -> the results `mask` asks for, of
    /// `(dx, dw, dbias)`.
    ConvBackward {
        stride: usize,
        padding: usize,
        groups: usize,
        mask: [bool; 3],
    },
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Conv>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    let builder =
        || -> Result<(usize, usize), ExecError> { Ok((a.usize("stride")?, a.usize("padding")?)) };
    let groups = a.get("groups").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
    Ok(Some(match kind {
        K::Conv2d => {
            let (stride, padding) = builder()?;
            Conv::Conv2d { stride, padding }
        }
        K::Conv2dGradInput => {
            let (stride, padding) = builder()?;
            Conv::Conv2dGradInput { stride, padding }
        }
        K::Conv2dGradWeight => {
            let (stride, padding) = builder()?;
            Conv::Conv2dGradWeight { stride, padding }
        }
        K::AtenConvolution => {
            let (stride, padding) = aten_window(cx)?;
            let bias = cx.inputs() > 2;
            if groups == 1 && !bias {
                Conv::Conv2d { stride, padding }
            } else {
                Conv::ConvGrouped {
                    stride,
                    padding,
                    groups,
                    bias,
                }
            }
        }
        K::AtenConvolutionBackward => {
            let (stride, padding) = aten_window(cx)?;
            Conv::ConvBackward {
                stride,
                padding,
                groups,
                mask: a.mask()?,
            }
        }
        _ => return Ok(None),
    }))
}

/// `(stride, padding)` of an exporter convolution, refused if transposed or dilated.
fn aten_window(cx: &Cx) -> Result<(usize, usize), ExecError> {
    let a = &cx.a;
    a.flag("transposed", false, "a convolution that is not transposed")?;
    a.unit_dilation()?;
    Ok((a.square("stride")?, a.square("padding")?))
}

impl Conv {
    /// The window geometry of this kernel over its operands, the same in every backend.
    pub(crate) fn window(&self, ins: &[Operand], outs: &[Operand]) -> Window {
        let s = |i: usize| ins[i].shape.as_slice();
        let y = || outs[0].shape.as_slice();
        match *self {
            Conv::Conv2d { stride, padding }
            | Conv::ConvGrouped {
                stride, padding, ..
            } => Window::conv(s(0), s(1), y(), stride, padding),
            Conv::Conv2dGradInput { stride, padding } => {
                Window::conv(y(), s(1), s(0), stride, padding)
            }
            Conv::Conv2dGradWeight { stride, padding } => {
                Window::conv(s(0), y(), s(1), stride, padding)
            }
            Conv::ConvBackward {
                stride, padding, ..
            } => Window::conv(s(1), s(2), s(0), stride, padding),
        }
    }
}

impl Family for Conv {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Conv::ConvGrouped { bias, .. } => (Some(2 + usize::from(*bias)), 1),
            Conv::ConvBackward { mask, .. } => (Some(3), mask.iter().filter(|m| **m).count()),
            _ => (Some(2), 1),
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Conv::Conv2d { stride, padding } => {
                let (x, w) = (s(0), s(1));
                expect(x.len() == 4 && w.len() == 4 && x[1] == w[1], || {
                    format!("conv of {x:?} by {w:?}")
                })?;
                let out = conv_out(x, w, *stride, *padding)?;
                eq("output", o(0), &out)
            }
            Conv::Conv2dGradInput { stride, padding } => {
                let (dy, w, dx) = (s(0), s(1), o(0));
                expect(dx.len() == 4 && w.len() == 4 && dx[1] == w[1], || {
                    format!("dx {dx:?} and weight {w:?}")
                })?;
                eq("dy", dy, &conv_out(dx, w, *stride, *padding)?)
            }
            Conv::Conv2dGradWeight { stride, padding } => {
                let (x, dy, dw) = (s(0), s(1), o(0));
                expect(x.len() == 4 && dw.len() == 4 && x[1] == dw[1], || {
                    format!("x {x:?} and dw {dw:?}")
                })?;
                eq("dy", dy, &conv_out(x, dw, *stride, *padding)?)
            }
            Conv::ConvGrouped {
                stride,
                padding,
                groups,
                bias,
            } => {
                let (x, w) = (s(0), s(1));
                grouped(x, w, *groups)?;
                if *bias {
                    eq("bias", s(2), &[w[0]])?;
                }
                eq("output", o(0), &conv_out(x, w, *stride, *padding)?)
            }
            Conv::ConvBackward {
                stride,
                padding,
                groups,
                mask,
            } => {
                let (dy, x, w) = (s(0), s(1), s(2));
                grouped(x, w, *groups)?;
                eq("dy", dy, &conv_out(x, w, *stride, *padding)?)?;
                let wanted: [&[usize]; 3] = [x, w, &[w[0]]];
                masked(mask, &wanted, outs)
            }
        }
    }
}

/// `x [N, C, H, W]` and `w [O, C/groups, kh, kw]` with `groups` dividing `C` and `O`.
fn grouped(x: &[usize], w: &[usize], groups: usize) -> Result<(), KernelError> {
    expect(
        x.len() == 4 && w.len() == 4 && groups > 0 && x[1] == w[1] * groups && w[0] % groups == 0,
        || format!("conv of {x:?} by {w:?} in {groups} groups"),
    )
}

fn conv_out(
    x: &[usize],
    w: &[usize],
    stride: usize,
    pad: usize,
) -> Result<Vec<usize>, KernelError> {
    let ho = window_out(x[2], w[2], stride, pad);
    let wo = window_out(x[3], w[3], stride, pad);
    match (ho, wo) {
        (Some(ho), Some(wo)) => Ok(vec![x[0], w[0], ho, wo]),
        _ => Err(KernelError::Operands(format!(
            "window {w:?} does not fit {x:?}"
        ))),
    }
}
