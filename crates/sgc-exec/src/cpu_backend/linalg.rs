//! Matrix products through `matrixmultiply::dgemm` on f64 copies of the operands, rounded
//! once to the operands' type (fixed blocking: the same operands always give the same bits).

use super::{f, last, Host, Io, Products, R};
use crate::ops::linalg::{inner_cols, Bmm, Linalg};
use crate::real::Real;

/// A row-major matrix view: element `(i, j)` is at `i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T: Real> Mat<'a, T> {
    /// A contiguous `rows x cols` matrix, transposed when `t`.
    pub fn new(data: &'a [T], cols: usize, t: bool) -> Self {
        if t {
            Mat {
                data,
                rs: 1,
                cs: cols,
            }
        } else {
            Mat {
                data,
                rs: cols,
                cs: 1,
            }
        }
    }
}

thread_local! {
    /// How the products of the kernel running on this thread sum ([`summing`]).
    static PRODUCTS: std::cell::Cell<Products> = const { std::cell::Cell::new(Products::Exact) };
}

/// Runs `f` (one kernel) with its products summing as `products` says: the backend's
/// setting, in force for exactly that kernel, so that the kernels' signatures need not
/// carry it.
pub(crate) fn summing<T>(products: Products, f: impl FnOnce() -> T) -> T {
    let before = PRODUCTS.with(|p| p.replace(products));
    let out = f();
    PRODUCTS.with(|p| p.set(before));
    out
}

/// `c[m, n] = a[m, k] @ b[k, n] + beta * c`, `c` contiguous. Shapes are checked before
/// any kernel runs (`crate::shapes`), so the slices hold every element addressed.
///
/// The CPU backend is the reference the CUDA backend and PyTorch are held to, so by
/// default ([`Products::Exact`]) its products are accurate rather than fast: the operands
/// are widened to f64 (exactly), multiplied with `dgemm`, and each result is rounded to
/// f32 once (an f64 product is dgemm's own). An f32 sum over k
/// terms carries an error that grows with k; at ResNet depth it was enough to move a ReLU
/// input that lay within 5e-6 of zero to the other side, and the whole step's gradient
/// with it. Rounded once, a product is within half an ulp of f32 of the float64 one (up to
/// f64's own error, 2^29 times smaller).
pub(crate) fn gemm<T: Real>(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<T>,
    b: Mat<T>,
    beta: f64,
    c: &mut [T],
) {
    debug_assert!(c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // An empty sum: C = beta * C, and exactly 0 for beta = 0 (C may hold stale NaNs).
        let scale = |v: &mut T| {
            *v = if beta == 0.0 {
                T::zero()
            } else {
                *v * T::of(beta)
            }
        };
        c[..m * n].iter_mut().for_each(scale);
        return;
    }
    if PRODUCTS.with(|p| p.get()) == Products::F32 {
        if let (Some(a32), Some(b32), Some(c32)) = (f32s(a.data), f32s(b.data), f32s_mut(c)) {
            let a = Mat {
                data: a32,
                rs: a.rs,
                cs: a.cs,
            };
            let b = Mat {
                data: b32,
                rs: b.rs,
                cs: b.cs,
            };
            return sgemm(m, k, n, a, b, beta as f32, c32);
        }
    }
    let (a64, b64) = (a.widened(m, k), b.widened(k, n));
    let mut c64: Vec<f64> = if beta == 0.0 {
        vec![0.0f64; m * n]
    } else {
        c[..m * n].iter().map(|&v| v.f64()).collect()
    };
    // SAFETY: a64 (m x k), b64 (k x n) and c64 (m x n) are contiguous row-major buffers of
    // exactly those sizes, owned here, so nothing aliases.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a64.as_ptr(),
            k as isize,
            1,
            b64.as_ptr(),
            n as isize,
            1,
            beta,
            c64.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    for (out, v) in c[..m * n].iter_mut().zip(&c64) {
        *out = T::of(*v);
    }
}

/// `s` as f32s when `T` is f32 (for [`Products::F32`], which only f32 products have).
fn f32s<T: Real>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: `T` is f32 (same type id), so the slice is reinterpreted as itself.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) })
}

/// [`f32s`], mutable.
fn f32s_mut<T: Real>(s: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as in `f32s`; the one mutable borrow moves into the result.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut f32, s.len()) })
}

/// [`gemm`] summing in f32 (`matrixmultiply::sgemm`, fixed blocking), [`Products::F32`].
fn sgemm(m: usize, k: usize, n: usize, a: Mat<f32>, b: Mat<f32>, beta: f32, c: &mut [f32]) {
    // SAFETY: the checked shapes guarantee that a (m x k with strides rs/cs), b (k x n)
    // and c (m x n, row-major) lie inside their slices, and c does not alias a or b
    // (outputs never overlap inputs: `backend::check_disjoint`).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

impl<T: Real> Mat<'_, T> {
    /// The `rows x cols` matrix this view addresses, contiguous and row-major, in f64.
    fn widened(&self, rows: usize, cols: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            let row = i * self.rs;
            out.extend((0..cols).map(|j| self.data[row + j * self.cs].f64()));
        }
        out
    }
}

/// `matmul`: `a [rows, k] @ b` with `b [k, n]`, or `b [n, k]` transposed.
pub(crate) fn matmul<T: Real>(
    a: &[T],
    b: &[T],
    y: &mut [T],
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    // Rows from the output: with k = 0, `a` is empty but `y` still has rows to zero.
    let rows = y.len().checked_div(n).unwrap_or(0);
    let bm = Mat::new(b, if transpose_b { k } else { n }, transpose_b);
    gemm(rows, k, n, Mat::new(a, k, false), bm, 0.0, y);
}

/// `matmul_tn`: `p [rows, m]^T @ q [rows, n]` -> `[m, n]`.
pub(crate) fn matmul_tn<T: Real>(p: &[T], q: &[T], y: &mut [T], m: usize, n: usize) {
    let rows = p.len().checked_div(m).unwrap_or(0);
    gemm(
        m,
        rows,
        n,
        Mat::new(p, m, true),
        Mat::new(q, n, false),
        0.0,
        y,
    );
}

/// `batched_matmul`: one product per leading index.
pub(crate) fn batched_matmul<T: Real>(a: &[T], b: &[T], y: &mut [T], d: &Bmm) {
    let (sa, sb, sy) = (d.m * d.k, d.k * d.n, d.m * d.n);
    for i in 0..d.batch {
        let ai = &a[i * sa..(i + 1) * sa];
        let bi = &b[i * sb..(i + 1) * sb];
        let am = Mat::new(ai, if d.transpose_a { d.m } else { d.k }, d.transpose_a);
        let bm = Mat::new(bi, if d.transpose_b { d.k } else { d.n }, d.transpose_b);
        gemm(d.m, d.k, d.n, am, bm, 0.0, &mut y[i * sy..(i + 1) * sy]);
    }
}

/// `addmm`: `a [M, K] @ b [K, N] + bias [N]` (`b [N, K]` when `transpose_b`).
pub(crate) fn addmm<T: Real>(
    bias: &[T],
    a: &[T],
    b: &[T],
    y: &mut [T],
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    matmul(a, b, y, k, n, transpose_b);
    for row in y.chunks_mut(n.max(1)) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// Runs a kernel of the family.
pub(super) fn run<T: Host>(k: &Linalg, io: Io<T>) -> R {
    let sh = |i: usize| io.ops_in[i].shape.as_slice();
    match k {
        Linalg::MatMul { transpose_b } => {
            let (kk, n) = inner_cols(sh(1), *transpose_b);
            matmul(
                f(&io.ins[0])?,
                f(&io.ins[1])?,
                io.outs[0],
                kk,
                n,
                *transpose_b,
            )
        }
        Linalg::MatMulTn => matmul_tn(
            f(&io.ins[0])?,
            f(&io.ins[1])?,
            io.outs[0],
            last(sh(0)),
            last(sh(1)),
        ),
        Linalg::BatchedMatMul {
            transpose_a,
            transpose_b,
        } => {
            let d = Bmm::of(sh(0), &io.ops_out[0].shape, *transpose_a, *transpose_b);
            batched_matmul(f(&io.ins[0])?, f(&io.ins[1])?, io.outs[0], &d)
        }
        Linalg::AddMm { transpose_b } => {
            let (k, n) = inner_cols(sh(2), *transpose_b);
            let (bias, a, b) = (f(&io.ins[0])?, f(&io.ins[1])?, f(&io.ins[2])?);
            addmm(bias, a, b, io.outs[0], k, n, *transpose_b)
        }
    }
    Ok(())
}
