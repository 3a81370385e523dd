//! Element-wise kernels, bias, and the SGD update.

/// `(dim, inner)` of broadcasting along `axis` of `shape`.
fn axis_split(shape: &[usize], axis: usize) -> (usize, usize) {
    (shape[axis], shape[axis + 1..].iter().product())
}

/// `x + bias` along `axis`: rows of `inner` elements share one bias value (no division
/// per element).
pub(crate) fn bias_add(x: &[f32], bias: &[f32], y: &mut [f32], shape: &[usize], axis: usize) {
    let (dim, inner) = axis_split(shape, axis);
    let rows = y.chunks_mut(inner.max(1)).zip(x.chunks(inner.max(1)));
    for (r, (yr, xr)) in rows.enumerate() {
        let b = bias[r % dim.max(1)];
        for (y, x) in yr.iter_mut().zip(xr) {
            *y = x + b;
        }
    }
}

/// `dy` summed over every axis but `axis`, in f64 (a sum over the batch: f32 drifts from
/// PyTorch by 100x on millions of rows), rounded once.
pub(crate) fn bias_add_grad(dy: &[f32], db: &mut [f32], shape: &[usize], axis: usize) {
    let (dim, inner) = axis_split(shape, axis);
    let mut acc = vec![0.0f64; db.len()];
    for (r, row) in dy.chunks(inner.max(1)).enumerate() {
        acc[r % dim.max(1)] += row.iter().map(|&g| f64::from(g)).sum::<f64>();
    }
    for (d, a) in db.iter_mut().zip(acc) {
        *d = a as f32;
    }
}

pub(crate) fn add(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
        *y = a + b;
    }
}

pub(crate) fn mul(a: &[f32], b: &[f32], y: &mut [f32]) {
    for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
        *y = a * b;
    }
}

pub(crate) fn relu(x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = x.max(0.0);
    }
}

/// `(y, dy)`: the gradient passes where the output is positive.
pub(crate) fn relu_grad(y: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((dx, y), g) in dx.iter_mut().zip(y).zip(dy) {
        *dx = if *y > 0.0 { *g } else { 0.0 };
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

pub(crate) fn gelu(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let t = (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh();
        *y = 0.5 * x * (1.0 + t);
    }
}

/// `(x, dy)`: `dy * d/dx [0.5 x (1 + tanh(c (x + 0.044715 x^3)))]`.
pub(crate) fn gelu_grad(x: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((dx, &x), g) in dx.iter_mut().zip(x).zip(dy) {
        let t = (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh();
        let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
        *dx = g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
    }
}

/// `param -= lr * grad`, in place.
pub(crate) fn sgd_update(param: &mut [f32], grad: &[f32], lr: f32) {
    for (p, g) in param.iter_mut().zip(grad) {
        *p -= lr * g;
    }
}
