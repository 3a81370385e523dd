//! Pooling over `[N, C, H, W]` (max, average, global average; the exporter's max pooling
//! with indices and adaptive average pooling) and nearest 2x upsampling, with their
//! gradients.

use super::check::{eq, expect, window_out, R};
use super::{Cx, Family, Slot};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use crate::window::Window;
use serde_json::Value;
use sgc_ir::ops::OpKind;
use sgc_ir::DType;

kinds! {
    cuda: MaxPool2d MaxPool2dGrad GlobalAvgPool GlobalAvgPoolGrad Upsample2x Upsample2xGrad
        AtenMaxPool2d AtenMaxPool2dBackward AtenAvgPool2d AtenAvgPool2dBackward
        AtenAdaptiveAvgPool2d AtenAdaptiveAvgPool2dBackward;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pool {
    MaxPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// `(x, dy) -> dx`, the gradient routed to the first maximum of each window.
    MaxPool2dGrad {
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    GlobalAvgPool,
    /// `dy [N, C] -> dx [N, C, H, W]`.
    GlobalAvgPoolGrad,
    /// `x -> (y, indices)`: the maximum of each window and its flat index in the plane.
    /// `ceil`: PyTorch's `ceil_mode` (one more window on an axis where the last would start
    /// inside the input or the left padding; taps past the input are skipped).
    MaxPool2dIndices {
        kernel: usize,
        stride: usize,
        padding: usize,
        ceil: bool,
    },
    /// `(dy, x, indices) -> dx`: each window's gradient added at its index.
    MaxPool2dIndicesBackward {
        kernel: usize,
        stride: usize,
        padding: usize,
        ceil: bool,
    },
    /// Average pooling; `ceil` as for max pooling, `divisor` what each window's sum is
    /// divided by.
    AvgPool2d {
        kernel: usize,
        stride: usize,
        padding: usize,
        ceil: bool,
        divisor: AvgDivisor,
    },
    /// `(dy, x) -> dx`.
    AvgPool2dBackward {
        kernel: usize,
        stride: usize,
        padding: usize,
        ceil: bool,
        divisor: AvgDivisor,
    },
    Upsample2x,
    /// Sum over each 2x2 block.
    Upsample2xGrad,
    /// The mean over each adaptive window (`sgc_ir::ops::OpKind::AtenAdaptiveAvgPool2d`):
    /// `x [N, C, H, W] -> y [N, C, ho, wo]`, `out` being `[ho, wo]`.
    AdaptiveAvgPool2d {
        out: [usize; 2],
    },
    /// `(dy [N, C, ho, wo], x [N, C, H, W]) -> dx`.
    AdaptiveAvgPool2dBackward,
}

/// What an average window's sum is divided by (ATen's `avg_pool2d`): `value` when given
/// (`divisor_override`); else with `count_pad` (`count_include_pad`) the window's extent
/// clipped to the padded input, without it the taps inside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgDivisor {
    pub count_pad: bool,
    pub value: Option<usize>,
}

impl Default for AvgDivisor {
    fn default() -> Self {
        AvgDivisor {
            count_pad: true,
            value: None,
        }
    }
}

/// `[start, end)` of window `i` of `out` over an axis of `len` (ATen's adaptive windows:
/// `floor(i * len / out)` to `ceil((i + 1) * len / out)`).
pub fn adaptive_window(i: usize, out: usize, len: usize) -> (usize, usize) {
    (i * len / out, ((i + 1) * len).div_ceil(out))
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Pool>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    Ok(Some(match kind {
        K::MaxPool2d => {
            let (kernel, stride, padding) = a.window()?;
            Pool::MaxPool2d {
                kernel,
                stride,
                padding,
            }
        }
        K::MaxPool2dGrad => {
            let (kernel, stride, padding) = a.window()?;
            Pool::MaxPool2dGrad {
                kernel,
                stride,
                padding,
            }
        }
        K::GlobalAvgPool => Pool::GlobalAvgPool,
        K::GlobalAvgPoolGrad => Pool::GlobalAvgPoolGrad,
        K::Upsample2x => Pool::Upsample2x,
        K::Upsample2xGrad => Pool::Upsample2xGrad,
        K::AtenMaxPool2d | K::AtenMaxPool2dBackward => {
            a.unit_dilation()?;
            let ceil = a.bool_or("ceil_mode", false)?;
            let (kernel, stride, padding) = aten_window(cx)?;
            if kind == K::AtenMaxPool2d {
                Pool::MaxPool2dIndices {
                    kernel,
                    stride,
                    padding,
                    ceil,
                }
            } else {
                Pool::MaxPool2dIndicesBackward {
                    kernel,
                    stride,
                    padding,
                    ceil,
                }
            }
        }
        K::AtenAdaptiveAvgPool2d => {
            let out = a.pair("output_size")?;
            if out.contains(&0) {
                return Err(a.err(format!("`output_size` = {out:?}: sizes above 0 run")));
            }
            Pool::AdaptiveAvgPool2d { out }
        }
        K::AtenAdaptiveAvgPool2dBackward => Pool::AdaptiveAvgPool2dBackward,
        K::AtenAvgPool2d | K::AtenAvgPool2dBackward => {
            let ceil = a.bool_or("ceil_mode", false)?;
            let divisor = AvgDivisor {
                count_pad: a.bool_or("count_include_pad", true)?,
                value: match a.get("divisor_override") {
                    None | Some(Value::Null) => None,
                    Some(_) => match a.usize("divisor_override")? {
                        0 => return Err(a.err("`divisor_override` must be above 0".into())),
                        d => Some(d),
                    },
                },
            };
            let (kernel, stride, padding) = aten_window(cx)?;
            if kind == K::AtenAvgPool2d {
                Pool::AvgPool2d {
                    kernel,
                    stride,
                    padding,
                    ceil,
                    divisor,
                }
            } else {
                Pool::AvgPool2dBackward {
                    kernel,
                    stride,
                    padding,
                    ceil,
                    divisor,
                }
            }
        }
        _ => return Ok(None),
    }))
}

/// `(kernel, stride, padding)` of an exporter pooling op (square windows; the stride
/// defaults to the kernel size).
fn aten_window(cx: &Cx) -> Result<(usize, usize, usize), ExecError> {
    let a = &cx.a;
    let kernel = a.square("kernel_size")?;
    let stride = a.square_or("stride", kernel)?;
    Ok((kernel, stride, a.square_or("padding", 0)?))
}

impl Pool {
    /// `(kernel, stride, padding)` of a windowed kernel (`None` for global pooling and
    /// upsampling).
    fn params(&self) -> Option<(usize, usize, usize)> {
        match *self {
            Pool::MaxPool2d {
                kernel,
                stride,
                padding,
            }
            | Pool::MaxPool2dGrad {
                kernel,
                stride,
                padding,
            }
            | Pool::MaxPool2dIndices {
                kernel,
                stride,
                padding,
                ..
            }
            | Pool::MaxPool2dIndicesBackward {
                kernel,
                stride,
                padding,
                ..
            }
            | Pool::AvgPool2d {
                kernel,
                stride,
                padding,
                ..
            }
            | Pool::AvgPool2dBackward {
                kernel,
                stride,
                padding,
                ..
            } => Some((kernel, stride, padding)),
            _ => None,
        }
    }

    /// Whether output lengths round up (`ceil_mode`).
    fn ceil(&self) -> bool {
        matches!(
            self,
            Pool::MaxPool2dIndices { ceil: true, .. }
                | Pool::MaxPool2dIndicesBackward { ceil: true, .. }
                | Pool::AvgPool2d { ceil: true, .. }
                | Pool::AvgPool2dBackward { ceil: true, .. }
        )
    }

    /// The slot of the pooled input: the forward's input, or the backward's `x` after `dy`.
    fn input_slot(&self) -> usize {
        match self {
            Pool::AvgPool2dBackward { .. } | Pool::MaxPool2dIndicesBackward { .. } => 1,
            _ => 0,
        }
    }

    /// The window geometry of a windowed pooling kernel over its operands, the same in
    /// every backend (`None` for global pooling and upsampling).
    pub(crate) fn window(&self, ins: &[Operand], outs: &[Operand]) -> Option<Window> {
        let (kernel, stride, padding) = self.params()?;
        let x = self.input_slot();
        let y = match self {
            Pool::MaxPool2dGrad { .. } => &ins[1].shape,
            _ if x == 1 => &ins[0].shape,
            _ => &outs[0].shape,
        };
        Some(Window::pool(&ins[x].shape, y, kernel, stride, padding))
    }

    /// Operand checks of a windowed kernel, whose pooled shape is `y`.
    fn check_windowed(&self, y: &[usize], ins: &[Operand], outs: &[Operand]) -> R {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Pool::MaxPool2d { .. } | Pool::AvgPool2d { .. } => eq("output", o(0), y),
            Pool::MaxPool2dGrad { .. } => {
                eq("dy", s(1), y)?;
                eq("output", o(0), s(0))
            }
            Pool::MaxPool2dIndices { .. } => {
                eq("output", o(0), y)?;
                eq("indices", o(1), y)
            }
            _ => {
                eq("dy", s(0), y)?;
                if matches!(self, Pool::MaxPool2dIndicesBackward { .. }) {
                    eq("indices", s(2), y)?;
                }
                eq("output", o(0), s(1))
            }
        }
    }
}

impl Family for Pool {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Pool::MaxPool2dGrad { .. }
            | Pool::AvgPool2dBackward { .. }
            | Pool::AdaptiveAvgPool2dBackward => (Some(2), 1),
            Pool::MaxPool2dIndices { .. } => (Some(1), 2),
            Pool::MaxPool2dIndicesBackward { .. } => (Some(3), 1),
            _ => (Some(1), 1),
        }
    }

    fn input(&self, i: usize) -> Slot {
        match (self, i) {
            (Pool::MaxPool2dIndicesBackward { .. }, 2) => Slot::Index,
            _ => Slot::Data,
        }
    }

    fn output_dtype(&self, i: usize) -> DType {
        match (self, i) {
            (Pool::MaxPool2dIndices { .. }, 1) => DType::I64,
            _ => DType::F32,
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        if let Some((kernel, stride, padding)) = self.params() {
            let y = pool_out(s(self.input_slot()), kernel, stride, padding, self.ceil())?;
            return self.check_windowed(&y, ins, outs);
        }
        match self {
            Pool::GlobalAvgPool => {
                expect(s(0).len() == 4, || format!("rank-4 input, got {:?}", s(0)))?;
                eq("output", o(0), &s(0)[..2])
            }
            Pool::GlobalAvgPoolGrad => {
                expect(o(0).len() == 4, || format!("rank-4 output, got {:?}", o(0)))?;
                eq("dy", s(0), &o(0)[..2])
            }
            Pool::Upsample2x => {
                let x = s(0);
                expect(x.len() == 4, || format!("rank-4 input, got {x:?}"))?;
                eq("output", o(0), &[x[0], x[1], 2 * x[2], 2 * x[3]])
            }
            Pool::AdaptiveAvgPool2d { out } => {
                let x = s(0);
                expect(x.len() == 4, || format!("rank-4 input, got {x:?}"))?;
                eq("output", o(0), &[x[0], x[1], out[0], out[1]])
            }
            Pool::AdaptiveAvgPool2dBackward => {
                let (dy, x) = (s(0), s(1));
                expect(dy.len() == 4 && x.len() == 4, || {
                    format!("rank-4 dy and input, got {dy:?} and {x:?}")
                })?;
                eq("dy", &dy[..2], &x[..2])?;
                eq("output", o(0), x)
            }
            _ => {
                let dx = o(0);
                expect(dx.len() == 4, || format!("rank-4 output, got {dx:?}"))?;
                eq("dy", s(0), &[dx[0], dx[1], 2 * dx[2], 2 * dx[3]])
            }
        }
    }
}

fn pool_out(
    x: &[usize],
    k: usize,
    stride: usize,
    pad: usize,
    ceil: bool,
) -> Result<Vec<usize>, KernelError> {
    expect(x.len() == 4 && 2 * pad <= k, || {
        format!("pool {k}x{k} (padding {pad}) of {x:?}")
    })?;
    let out = |len: usize| {
        let floor = window_out(len, k, stride, pad)?;
        // ATen's ceil_mode: one more window when some input remains after the last one,
        // unless that window would start in the right padding.
        let more = ceil && (len + 2 * pad - k) % stride != 0 && floor * stride < len + pad;
        Some(floor + usize::from(more))
    };
    match (out(x[2]), out(x[3])) {
        (Some(ho), Some(wo)) => Ok(vec![x[0], x[1], ho, wo]),
        _ => Err(KernelError::Operands(format!(
            "window {k} does not fit {x:?}"
        ))),
    }
}
