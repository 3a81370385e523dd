//! 2-d convolutions over `[N, C, H, W]`: the builder's `conv2d` and its gradients, and the
//! exporter's `convolution` (groups, bias, transposed) and `convolution_backward`. Padding
//! may differ between rows and columns (`[pad_h, pad_w]`); the stride may not.
//!
//! A transposed convolution of `x [N, Ci, H, W]` by `w [Ci, Co, kh, kw]` is the input
//! gradient of the plain convolution of its output `y [N, Co, Ho, Wo]` by the same `w`
//! (read as `[O = Ci, C = Co, kh, kw]`), which gives back `x`'s shape; so it runs on the
//! plain kernels with the roles swapped, and its window is that plain convolution's.

use super::check::{eq, expect, masked, window_out, R};
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
    Conv2d { stride: usize, padding: [usize; 2] },
    /// `(dy, w) -> dx`.
    Conv2dGradInput { stride: usize, padding: [usize; 2] },
    /// `(x, dy) -> dw`.
    Conv2dGradWeight { stride: usize, padding: [usize; 2] },
    /// `aten.convolution` with groups or a bias: `(x, w[, bias])`, `w [O, C/groups, kh, kw]`.
    ConvGrouped {
        stride: usize,
        padding: [usize; 2],
        groups: usize,
        bias: bool,
    },
    /// `aten.convolution_backward`: `(dy, x, w)` -> the results `mask` asks for, of
    /// `(dx, dw, dbias)`.
    ConvBackward {
        stride: usize,
        padding: [usize; 2],
        groups: usize,
        mask: [bool; 3],
    },
    /// `aten.convolution` with `transposed`, one group: `(x, w[, bias])`.
    ConvTransposed {
        stride: usize,
        padding: [usize; 2],
        bias: bool,
    },
    /// Its `convolution_backward`: `(dy, x, w)` -> the masked `(dx, dw, dbias)`.
    ConvTransposedBackward {
        stride: usize,
        padding: [usize; 2],
        mask: [bool; 3],
    },
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Conv>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    let builder = || -> Result<(usize, [usize; 2]), ExecError> {
        let p = a.usize("padding")?;
        Ok((a.usize("stride")?, [p, p]))
    };
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
            let (stride, padding, transposed) = aten_window(cx, groups)?;
            let bias = cx.inputs() > 2;
            if transposed {
                Conv::ConvTransposed {
                    stride,
                    padding,
                    bias,
                }
            } else if groups == 1 && !bias {
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
            let (stride, padding, transposed) = aten_window(cx, groups)?;
            if transposed {
                return Ok(Some(Conv::ConvTransposedBackward {
                    stride,
                    padding,
                    mask: a.mask()?,
                }));
            }
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

/// `(stride, padding, transposed)` of an exporter convolution, refused if dilated or
/// transposed in groups.
fn aten_window(cx: &Cx, groups: usize) -> Result<(usize, [usize; 2], bool), ExecError> {
    let a = &cx.a;
    a.unit_dilation()?;
    let transposed = a.bool_or("transposed", false)?;
    if transposed && groups != 1 {
        return Err(a.err(format!(
            "`groups` = {groups}: only one group runs transposed"
        )));
    }
    Ok((a.square("stride")?, a.pair("padding")?, transposed))
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
            // The plain convolution of the output (`y`, `dy`) that gives back `x`.
            Conv::ConvTransposed {
                stride, padding, ..
            } => Window::conv(y(), s(1), s(0), stride, padding),
            Conv::ConvTransposedBackward {
                stride, padding, ..
            } => Window::conv(s(0), s(2), s(1), stride, padding),
        }
    }
}

impl Family for Conv {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Conv::ConvGrouped { bias, .. } | Conv::ConvTransposed { bias, .. } => {
                (Some(2 + usize::from(*bias)), 1)
            }
            Conv::ConvBackward { mask, .. } | Conv::ConvTransposedBackward { mask, .. } => {
                (Some(3), mask.iter().filter(|m| **m).count())
            }
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
            Conv::ConvTransposed { bias, .. } => {
                let (x, w) = (s(0), s(1));
                self.transposed(x, w, o(0))?;
                match bias {
                    true => eq("bias", s(2), &[w[1]]),
                    false => Ok(()),
                }
            }
            Conv::ConvTransposedBackward { mask, .. } => {
                let (x, w) = (s(1), s(2));
                self.transposed(x, w, s(0))?;
                masked(mask, &[x, w, &[w[1]]], outs)
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

impl Conv {
    /// `(stride, padding)` of any of the kernels.
    fn geometry(&self) -> (usize, [usize; 2]) {
        match *self {
            Conv::Conv2d { stride, padding }
            | Conv::Conv2dGradInput { stride, padding }
            | Conv::Conv2dGradWeight { stride, padding }
            | Conv::ConvGrouped {
                stride, padding, ..
            }
            | Conv::ConvBackward {
                stride, padding, ..
            }
            | Conv::ConvTransposed {
                stride, padding, ..
            }
            | Conv::ConvTransposedBackward {
                stride, padding, ..
            } => (stride, padding),
        }
    }

    /// `x [N, Ci, H, W]` transposed-convolved by `w [Ci, Co, kh, kw]` into
    /// `y [N, Co, Ho, Wo]`: the plain convolution of `y` by `w` gives `x`'s shape.
    fn transposed(&self, x: &[usize], w: &[usize], y: &[usize]) -> R {
        let (stride, pad) = self.geometry();
        expect(
            x.len() == 4 && w.len() == 4 && y.len() == 4 && y[1] == w[1],
            || format!("transposed conv of {x:?} by {w:?} into {y:?}"),
        )?;
        eq("input", x, &conv_out(y, w, stride, pad)?)
    }
}

fn conv_out(
    x: &[usize],
    w: &[usize],
    stride: usize,
    pad: [usize; 2],
) -> Result<Vec<usize>, KernelError> {
    let ho = window_out(x[2], w[2], stride, pad[0]);
    let wo = window_out(x[3], w[3], stride, pad[1]);
    match (ho, wo) {
        (Some(ho), Some(wo)) => Ok(vec![x[0], w[0], ho, wo]),
        _ => Err(KernelError::Operands(format!(
            "window {w:?} does not fit {x:?}"
        ))),
    }
}
