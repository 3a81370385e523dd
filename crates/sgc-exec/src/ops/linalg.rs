//! Matrix products: the builder's `matmul`, `matmul_tn`, `batched_matmul`, and the
//! exporter's `mm`, `bmm`, `addmm`.

use super::check::{eq, expect};
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: MatMul MatMulTn BatchedMatMul AtenMm AtenBmm AtenAddmm;
    cpu: ;
}

#[derive(Clone, Debug, PartialEq)]
pub enum Linalg {
    /// `a [*, K] @ b [K, N]` (`b [N, K]` when `transpose_b`) -> `[*, N]`.
    MatMul { transpose_b: bool },
    /// `p [*, M]^T @ q [*, N]` over the flattened leading rows -> `[M, N]`.
    MatMulTn,
    /// `op_a(a) [*, M, K] @ op_b(b) [*, K, N]` -> `[*, M, N]`.
    BatchedMatMul {
        transpose_a: bool,
        transpose_b: bool,
    },
    /// `(bias [N], a [M, K], b [K, N]) -> a @ b + bias` (`b [N, K]` when `transpose_b`).
    AddMm { transpose_b: bool },
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Linalg>, ExecError> {
    use OpKind as K;
    let a = &cx.a;
    Ok(Some(match kind {
        K::MatMul => Linalg::MatMul {
            transpose_b: a.bool_or("transpose_b", false)?,
        },
        K::MatMulTn => Linalg::MatMulTn,
        K::BatchedMatMul => Linalg::BatchedMatMul {
            transpose_a: a.bool_or("transpose_a", false)?,
            transpose_b: a.bool_or("transpose_b", false)?,
        },
        K::AtenMm => Linalg::MatMul { transpose_b: false },
        K::AtenBmm => Linalg::BatchedMatMul {
            transpose_a: false,
            transpose_b: false,
        },
        K::AtenAddmm => {
            a.number("beta", 1.0)?;
            a.number("alpha", 1.0)?;
            Linalg::AddMm { transpose_b: false }
        }
        _ => return Ok(None),
    }))
}

/// `(K, N)` of a right operand `b` (`[K, N]`, or `[N, K]` when transposed).
pub(crate) fn inner_cols(b: &[usize], transpose_b: bool) -> (usize, usize) {
    if transpose_b {
        (b[1], b[0])
    } else {
        (b[0], b[1])
    }
}

/// Dimensions of one `batched_matmul`.
pub(crate) struct Bmm {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub transpose_a: bool,
    pub transpose_b: bool,
}

impl Bmm {
    /// The product of `a [*, M, K]` (`[*, K, M]` when `transpose_a`) into `y [*, M, N]`.
    pub(crate) fn of(a: &[usize], y: &[usize], transpose_a: bool, transpose_b: bool) -> Bmm {
        let r = a.len();
        Bmm {
            batch: a[..r - 2].iter().product(),
            m: y[r - 2],
            n: y[r - 1],
            k: if transpose_a { a[r - 2] } else { a[r - 1] },
            transpose_a,
            transpose_b,
        }
    }
}

impl Family for Linalg {
    fn arity(&self) -> (Option<usize>, usize) {
        match self {
            Linalg::AddMm { .. } => (Some(3), 1),
            _ => (Some(2), 1),
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let s = |i: usize| ins[i].shape.as_slice();
        let o = |i: usize| outs[i].shape.as_slice();
        match self {
            Linalg::MatMul { transpose_b } => {
                let (a, b) = (s(0), s(1));
                expect(a.len() >= 2 && b.len() == 2, || {
                    format!("ranks {a:?} @ {b:?}")
                })?;
                let (kk, n) = inner_cols(b, *transpose_b);
                expect(a[a.len() - 1] == kk, || {
                    format!("inner dims of {a:?} @ {b:?}")
                })?;
                eq("output", o(0), &[&a[..a.len() - 1], &[n]].concat())
            }
            Linalg::MatMulTn => {
                let (p, q) = (s(0), s(1));
                expect(!p.is_empty() && !q.is_empty(), || "scalar operand".into())?;
                let rows = |x: &[usize]| x[..x.len() - 1].iter().product::<usize>();
                expect(rows(p) == rows(q), || {
                    format!("rows of {p:?} and {q:?} differ")
                })?;
                eq("output", o(0), &[p[p.len() - 1], q[q.len() - 1]])
            }
            Linalg::BatchedMatMul {
                transpose_a,
                transpose_b,
            } => {
                let (a, b) = (s(0), s(1));
                let r = a.len();
                expect(r >= 3 && b.len() == r && a[..r - 2] == b[..r - 2], || {
                    format!("batched operands {a:?}, {b:?}")
                })?;
                let (m, ka) = if *transpose_a {
                    (a[r - 1], a[r - 2])
                } else {
                    (a[r - 2], a[r - 1])
                };
                let (kb, n) = if *transpose_b {
                    (b[r - 1], b[r - 2])
                } else {
                    (b[r - 2], b[r - 1])
                };
                expect(ka == kb, || format!("inner dims of {a:?} @ {b:?}"))?;
                eq("output", o(0), &[&a[..r - 2], &[m, n]].concat())
            }
            Linalg::AddMm { transpose_b } => {
                let (bias, a, b) = (s(0), s(1), s(2));
                expect(a.len() == 2 && b.len() == 2, || {
                    format!("addmm of {a:?} @ {b:?}")
                })?;
                let (k, n) = inner_cols(b, *transpose_b);
                expect(a[1] == k, || format!("addmm of {a:?} @ {b:?}"))?;
                expect(
                    bias.iter().product::<usize>() == n && bias.last() == Some(&n),
                    || format!("bias {bias:?} for {n} columns"),
                )?;
                eq("output", o(0), &[a[0], n])
            }
        }
    }
}
