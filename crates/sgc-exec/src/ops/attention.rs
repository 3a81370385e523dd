//! Scaled dot-product attention, as ATen's `_scaled_dot_product_flash_attention_for_cpu`
//! and its backward compute it (no dropout, no mask beyond `is_causal`).
//!
//! Forward, per batch index (every axis before the last two): scores `S = scale * Q K^T`
//! (`[L, S]`; with `is_causal`, `-inf` where the key comes after the query), the row's
//! log-sum-exp `lse`, probabilities `P = exp(S - lse)`, output `O = P V`; the op returns
//! `(O, lse)`. Backward from `(dO, Q, K, V, O, lse)`: `P` recomputed from `lse`,
//! `dP = dO V^T`, `dS = P * (dP - rowsum(P * dP))`, then `dQ = scale * dS K`,
//! `dK = scale * dS^T Q`, `dV = P^T dO`. Every row sum runs in a fixed order (f64), so a
//! recomputation repeats its bits.
//!
//! Grouped-query attention (GQA, as Llama-style models trace it): keys and values with
//! fewer heads (axis -3) than the queries, each key/value head serving `group` consecutive
//! query heads. Query problem `b` reads key/value problem `b / group` (the problems are
//! row-major over the leading axes, so this is `outer * kv_heads + head / group`); the
//! backward sums the group's `dK` and `dV` in head order. Both backends (CUDA through
//! repeated keys and values, `cuda_backend/attention.rs`).

use super::check::{eq, expect};
use super::{Cx, Family};
use crate::error::{ExecError, KernelError};
use crate::operand::Operand;
use crate::real::Real;
use serde_json::Value;
use sgc_ir::ops::OpKind;

kinds! {
    cuda: AtenSdpa AtenSdpaBackward;
    cpu: ;
}

/// Forward (`(q, k, v) -> (out, logsumexp)`) or backward
/// (`(d_out, q, k, v, out, logsumexp) -> (dq, dk, dv)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub backward: bool,
    /// The scores' scale; `None`: `1 / sqrt(E)` (ATen's default).
    pub scale: Option<f64>,
    pub causal: bool,
    /// Keys and values have fewer heads than the queries (grouped-query attention).
    pub grouped: bool,
}

/// The sizes of one attention: `batch` problems of `l` queries and `s` keys, head size
/// `e` (queries and keys) and `ev` (values), and the resolved scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sdpa {
    pub batch: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    /// The scale as given; `None`: `1 / sqrt(e)`, computed in the kernel's type.
    pub scale: Option<f64>,
    pub causal: bool,
    /// Query heads per key/value head (1 without grouped-query attention).
    pub group: usize,
}

impl Sdpa {
    /// The scores' scale in `T`: the given one rounded, or `1 / sqrt(e)` computed in `T`
    /// (in f32 as ATen's float kernels compute it).
    pub fn scale_in<T: Real>(&self) -> T {
        match self.scale {
            Some(s) => T::of(s),
            None => T::one() / T::of(self.e as f64).sqrt(),
        }
    }

    /// Whether query `i` may not see key `j`.
    pub fn masked(&self, i: usize, j: usize) -> bool {
        self.causal && j > i
    }
}

/// The kernel of op kind `kind`, if this family runs it.
pub(crate) fn parse(kind: OpKind, cx: &Cx) -> Result<Option<Attention>, ExecError> {
    let backward = match kind {
        OpKind::AtenSdpa => false,
        OpKind::AtenSdpaBackward => true,
        _ => return Ok(None),
    };
    let a = &cx.a;
    a.number("dropout_p", 0.0)?;
    a.require("attn_mask", Value::is_null, "no mask")?;
    let scale = match a.get("scale") {
        None | Some(Value::Null) => None,
        Some(_) => Some(a.f64_or("scale", None)?),
    };
    let at = usize::from(backward);
    let heads = |i: usize| {
        let s = cx.shape(i).unwrap_or(&[]);
        (s.len() >= 3).then(|| s[s.len() - 3])
    };
    Ok(Some(Attention {
        backward,
        scale,
        causal: a.bool_or("is_causal", false)?,
        grouped: heads(at) != heads(at + 1),
    }))
}

impl Attention {
    /// The sizes of a launch with inputs `ins` (shapes checked).
    pub fn sizes(&self, ins: &[Operand]) -> Sdpa {
        let q = &ins[usize::from(self.backward)].shape;
        let (k, v) = (
            &ins[1 + usize::from(self.backward)].shape,
            &ins[2 + usize::from(self.backward)].shape,
        );
        let r = q.len();
        let e = q[r - 1];
        let group = if r >= 3 {
            q[r - 3] / k[r - 3].max(1)
        } else {
            1
        };
        Sdpa {
            batch: q[..r - 2].iter().product(),
            l: q[r - 2],
            s: k[r - 2],
            e,
            ev: v[r - 1],
            scale: self.scale,
            causal: self.causal,
            group: group.max(1),
        }
    }
}

impl Family for Attention {
    fn arity(&self) -> (Option<usize>, usize) {
        if self.backward {
            (Some(6), 3)
        } else {
            (Some(3), 2)
        }
    }

    fn check_shapes(&self, ins: &[Operand], outs: &[Operand]) -> Result<(), KernelError> {
        let at = usize::from(self.backward);
        let (q, k, v) = (&ins[at].shape, &ins[at + 1].shape, &ins[at + 2].shape);
        let r = q.len();
        expect(r >= 2 && k.len() == r && v.len() == r, || {
            format!("query {q:?}, key {k:?}, value {v:?}: one rank, at least 2")
        })?;
        // Every leading axis alike, but the heads (axis -3) of a grouped attention, whose
        // key/value count divides the queries'.
        let heads = r.saturating_sub(3);
        let lead = |x: &[usize]| {
            let mut l = x[..r - 2].to_vec();
            if r >= 3 && self.grouped {
                l[heads] = 0;
            }
            l
        };
        let groups = r < 3 || !self.grouped || (k[heads] > 0 && q[heads] % k[heads] == 0);
        let fits = lead(k) == lead(q)
            && k[..r - 2] == v[..r - 2]
            && groups
            && k[r - 1] == q[r - 1]
            && v[r - 2] == k[r - 2];
        expect(fits, || {
            format!("query {q:?}, key {k:?}, value {v:?} do not make one attention")
        })?;
        let mut out = q.clone();
        out[r - 1] = v[r - 1];
        let lse = &q[..r - 1];
        if self.backward {
            eq("output gradient", &ins[0].shape, &out)?;
            eq("output", &ins[4].shape, &out)?;
            eq("logsumexp", &ins[5].shape, lse)?;
            eq("query gradient", &outs[0].shape, q)?;
            eq("key gradient", &outs[1].shape, k)?;
            eq("value gradient", &outs[2].shape, v)
        } else {
            eq("output", &outs[0].shape, &out)?;
            eq("logsumexp", &outs[1].shape, lse)
        }
    }
}
