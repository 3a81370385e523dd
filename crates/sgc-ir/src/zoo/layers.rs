//! Layers shared by the zoo models: each creates its parameters (named as PyTorch
//! does, `<layer>.weight`, `<layer>.bias`) and appends its ops.

use crate::train::{TrainBuilder, TrainError, Var};

pub(super) type R<T> = Result<T, TrainError>;

/// A linear layer `[in] -> [out]` with weight `[in, out]` and an optional bias.
pub(super) fn dense(b: &mut TrainBuilder, name: &str, x: Var, out: u64, bias: bool) -> R<Var> {
    let inp = b.shape(x).last().copied().unwrap_or(0);
    let w = b.param(&format!("{name}.weight"), &[inp, out])?;
    let bias = if bias {
        Some(b.param(&format!("{name}.bias"), &[out])?)
    } else {
        None
    };
    b.linear(name, x, w, bias)
}

/// A square convolution over NCHW; with a bias, the conv op is `<name>.conv` and the
/// channel `bias_add` is `<name>`.
pub(super) struct Conv {
    pub out: u64,
    pub kernel: u64,
    pub stride: u64,
    pub padding: u64,
    pub bias: bool,
}

pub(super) fn conv(b: &mut TrainBuilder, name: &str, x: Var, c: Conv) -> R<Var> {
    let cin = b.shape(x).get(1).copied().unwrap_or(0);
    let w = b.param(&format!("{name}.weight"), &[c.out, cin, c.kernel, c.kernel])?;
    if !c.bias {
        return b.conv2d(name, x, w, c.stride, c.padding);
    }
    let y = b.conv2d(&format!("{name}.conv"), x, w, c.stride, c.padding)?;
    let bias = b.param(&format!("{name}.bias"), &[c.out])?;
    b.bias_add(name, y, bias, 1)
}

/// A 3x3 convolution with padding 1 (same size at stride 1).
pub(super) fn conv3x3(out: u64, stride: u64, bias: bool) -> Conv {
    Conv {
        out,
        kernel: 3,
        stride,
        padding: 1,
        bias,
    }
}

/// A 1x1 convolution.
pub(super) fn conv1x1(out: u64, stride: u64, bias: bool) -> Conv {
    Conv {
        out,
        kernel: 1,
        stride,
        padding: 0,
        bias,
    }
}

/// Batch norm over channels with gamma (`.weight`) and beta (`.bias`).
pub(super) fn bn(b: &mut TrainBuilder, name: &str, x: Var) -> R<Var> {
    let c = b.shape(x).get(1).copied().unwrap_or(0);
    let gamma = b.param(&format!("{name}.weight"), &[c])?;
    let beta = b.param(&format!("{name}.bias"), &[c])?;
    b.batch_norm(name, x, gamma, beta)
}

/// Layer norm over the last axis with gamma (`.weight`) and beta (`.bias`).
pub(super) fn ln(b: &mut TrainBuilder, name: &str, x: Var) -> R<Var> {
    let d = b.shape(x).last().copied().unwrap_or(0);
    let gamma = b.param(&format!("{name}.weight"), &[d])?;
    let beta = b.param(&format!("{name}.bias"), &[d])?;
    b.layer_norm(name, x, gamma, beta)
}
