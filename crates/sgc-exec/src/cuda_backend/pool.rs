//! Pooling (max with the first maximum, with or without indices; average; global
//! average) and nearest 2x upsampling over `[N, C, H, W]` (`kernels/pool.cu`; the CPU
//! reference is `cpu_backend/pool.rs`, same names). The backward kernels gather, one
//! thread per input element over the windows covering it, in the order the CPU scatters.

use super::device::Idx;
use super::device::{n, Arg, Device, Grid, R};
use super::launch::with_ptrs;
use super::launch::Io;
use crate::error::KernelError;
use crate::ops::pool::{AvgDivisor, Pool};
use crate::window::Window;

impl Window {
    /// Pooling arguments: `planes, h, w, k, stride, pad, ho, wo`.
    fn pool_args(&self) -> [Arg; 8] {
        [
            n(self.n * self.c),
            n(self.h),
            n(self.w),
            n(self.kh),
            n(self.stride),
            n(self.pad[0]),
            n(self.ho),
            n(self.wo),
        ]
    }
}

/// The divisor arguments of the average pools: `count_pad`, and the override (0: none).
fn avg(d: AvgDivisor) -> [Arg; 2] {
    [Arg::I32(d.count_pad as i32), n(d.value.unwrap_or(0))]
}

/// `max_pool2d` (padding counts as -infinity).
pub(crate) fn max_pool2d(d: &Device, x: u64, y: u64, g: &Window) -> R {
    let total = g.n * g.c * g.ho * g.wo;
    d.launch(
        "max_pool2d",
        Grid::Elements(total),
        &with_ptrs(&[x, y], g.pool_args()),
    )
}

/// `max_pool2d_grad`: each window's gradient goes to its first maximum.
pub(crate) fn max_pool2d_grad(d: &Device, x: u64, dy: u64, dx: u64, g: &Window) -> R {
    let total = g.n * g.image();
    let args = with_ptrs(&[x, dy, dx], g.pool_args());
    d.launch("max_pool2d_grad", Grid::Elements(total), &args)
}

/// `global_avg_pool`: the mean of each `H*W` plane.
pub(crate) fn global_avg_pool(d: &Device, x: u64, y: u64, planes: usize, hw: usize) -> R {
    let args = [Arg::Ptr(x), Arg::Ptr(y), n(planes), n(hw)];
    d.launch("global_avg_pool", Grid::Rows(planes), &args)
}

/// `global_avg_pool_grad`: `dy / (H*W)` spread over each plane.
pub(crate) fn global_avg_pool_grad(d: &Device, dy: u64, dx: u64, planes: usize, hw: usize) -> R {
    let args = [Arg::Ptr(dy), Arg::Ptr(dx), n(planes), n(hw)];
    d.launch("global_avg_pool_grad", Grid::Elements(planes * hw), &args)
}

/// `upsample_nearest2x` of `planes` planes `h x w`.
pub(crate) fn upsample_nearest2x(
    d: &Device,
    x: u64,
    y: u64,
    planes: usize,
    h: usize,
    w: usize,
) -> R {
    let args = [Arg::Ptr(x), Arg::Ptr(y), n(planes), n(h), n(w)];
    d.launch(
        "upsample_nearest2x",
        Grid::Elements(planes * 4 * h * w),
        &args,
    )
}

/// `upsample_nearest2x_grad`: sum of each 2x2 block, into `planes` planes `h x w`.
pub(crate) fn upsample_nearest2x_grad(
    d: &Device,
    dy: u64,
    dx: u64,
    planes: usize,
    h: usize,
    w: usize,
) -> R {
    let args = [Arg::Ptr(dy), Arg::Ptr(dx), n(planes), n(h), n(w)];
    d.launch(
        "upsample_nearest2x_grad",
        Grid::Elements(planes * h * w),
        &args,
    )
}

/// Runs a kernel of the family.
pub(super) fn run(k: &Pool, d: &mut Device, io: Io) -> R {
    let Io { ins, outs, .. } = io;
    let (x, y) = (
        io.ops_in[0].shape.as_slice(),
        io.ops_out[0].shape.as_slice(),
    );
    match (k, k.window(io.ops_in, io.ops_out)) {
        (Pool::MaxPool2d { .. }, Some(g)) => max_pool2d(d, ins[0], outs[0], &g),
        (Pool::MaxPool2dGrad { .. }, Some(g)) => max_pool2d_grad(d, ins[0], ins[1], outs[0], &g),
        (Pool::GlobalAvgPool, _) => global_avg_pool(d, ins[0], outs[0], x[0] * x[1], x[2] * x[3]),
        (Pool::GlobalAvgPoolGrad, _) => {
            global_avg_pool_grad(d, ins[0], outs[0], y[0] * y[1], y[2] * y[3])
        }
        (Pool::Upsample2x, _) => upsample_nearest2x(d, ins[0], outs[0], x[0] * x[1], x[2], x[3]),
        (Pool::Upsample2xGrad, _) => {
            upsample_nearest2x_grad(d, ins[0], outs[0], y[0] * y[1], y[2], y[3])
        }
        (Pool::MaxPool2dIndices { .. }, Some(g)) => {
            let total = g.n * g.c * g.ho * g.wo;
            let args = with_ptrs(&[ins[0], outs[0], outs[1]], g.pool_args());
            d.launch("max_pool2d_indices", Grid::Elements(total), &args)
        }
        (Pool::MaxPool2dIndicesBackward { .. }, Some(g)) => {
            let idx = Idx::of(&io.ops_in[2], ins[2]);
            let pooled = io.ops_in[2].numel();
            let check = [
                Arg::Ptr(idx.ptr),
                idx.args()[1],
                n(pooled),
                n(g.h * g.w),
                d.flag(),
            ];
            d.launch("pool_index_check", Grid::Elements(pooled), &check)?;
            let args: Vec<Arg> = [Arg::Ptr(ins[0])]
                .into_iter()
                .chain(idx.args())
                .chain([Arg::Ptr(outs[0])])
                .chain(g.pool_args())
                .collect();
            d.launch(
                "max_pool2d_indices_backward",
                Grid::Elements(g.n * g.image()),
                &args,
            )?;
            d.check_flag()
        }
        (Pool::AvgPool2d { divisor, .. }, Some(g)) => {
            let total = g.n * g.c * g.ho * g.wo;
            let args = [&with_ptrs(&[ins[0], outs[0]], g.pool_args())[..], &avg(*divisor)].concat();
            d.launch("avg_pool2d", Grid::Elements(total), &args)
        }
        (Pool::AvgPool2dBackward { divisor, .. }, Some(g)) => {
            let args = [&with_ptrs(&[ins[0], outs[0]], g.pool_args())[..], &avg(*divisor)].concat();
            d.launch(
                "avg_pool2d_backward",
                Grid::Elements(g.n * g.image()),
                &args,
            )
        }
        (Pool::AdaptiveAvgPool2d { .. }, _) => {
            let sizes = [n(x[0] * x[1]), n(x[2]), n(x[3]), n(y[2]), n(y[3])];
            let args = with_ptrs(&[ins[0], outs[0]], sizes);
            d.launch("adaptive_avg_pool2d", Grid::Elements(y.iter().product()), &args)
        }
        // `(dy, x)`: the input's sizes are the output's.
        (Pool::AdaptiveAvgPool2dBackward, _) => {
            let sizes = [n(x[0] * x[1]), n(y[2]), n(y[3]), n(x[2]), n(x[3])];
            let args = with_ptrs(&[ins[0], outs[0]], sizes);
            d.launch("adaptive_avg_pool2d_backward", Grid::Elements(y.iter().product()), &args)
        }
        _ => Err(KernelError::Operands("no pooling window".to_string())),
    }
}
