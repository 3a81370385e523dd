//! Reverse-mode differentiation of the builder's tape: one derivative rule per forward op
//! type, gradient accumulation with explicit `add` ops. See the module docs of
//! [`crate::train`] for the method and `docs/ops.md` for the backward op types.

use super::{numel, NewOp, Record, Rule, TrainBuilder, TrainError, Var};
use crate::ids::Phase;
use crate::ops::OpKind;
use serde_json::json;

type R<T> = Result<T, TrainError>;

/// A gradient contribution: (input slot of the forward op, gradient tensor).
type Contribution = (usize, Var);

impl TrainBuilder {
    /// Appends the backward ops of the tape, from `loss` back; returns each tensor's
    /// complete gradient (none for tensors that do not lead to the loss).
    pub(super) fn differentiate(&mut self, loss: Var) -> R<Vec<Option<Var>>> {
        let loss_name = || self.name_of(loss).to_string();
        let from_ce = self
            .tape
            .iter()
            .any(|r| r.rule == Rule::CrossEntropy && r.outputs[0] == loss);
        if !from_ce {
            return Err(TrainError::LossNotCrossEntropy(loss_name()));
        }
        let mut grads: Vec<Option<Var>> = vec![None; self.tensors.len()];
        let mut sums = vec![0usize; self.tensors.len()];
        let tape = std::mem::take(&mut self.tape);
        for rec in tape.iter().rev() {
            let out = rec.outputs[0];
            let dy = grads[out.index()];
            if rec.rule == Rule::CrossEntropy {
                if out != loss {
                    if dy.is_some() {
                        return Err(TrainError::SecondLoss(rec.name.clone()));
                    }
                    continue;
                }
            } else if dy.is_none() {
                continue;
            }
            for (slot, g) in self.backward(rec, dy)? {
                let x = rec.inputs[slot];
                grads[x.index()] = Some(match grads[x.index()] {
                    None => g,
                    Some(prev) => self.accumulate(x, prev, g, &mut sums[x.index()])?,
                });
            }
        }
        self.tape = tape;
        Ok(grads)
    }

    /// `prev + g` as `<x>.grad_acc<k>`.
    fn accumulate(&mut self, x: Var, prev: Var, g: Var, count: &mut usize) -> R<Var> {
        *count += 1;
        let name = format!("{}.grad_acc{}", self.name_of(x), count);
        let flops = numel(self.shape(x)) as f64;
        let sum = self.activation_like(&name, x)?;
        let op = NewOp::new(&name, OpKind::Add, vec![prev, g], vec![sum], flops)
            .inplace(0, 0)
            .inplace(0, 1);
        self.push(op, Phase::Backward)?;
        Ok(sum)
    }

    /// A backward op whose single output is the gradient of forward input `like`.
    fn grad_op(&mut self, op: NewOp, like: Var) -> R<Var> {
        let g = self.activation_like(&op.name, like)?;
        let op = NewOp {
            outputs: vec![g],
            ..op
        };
        self.push(op, Phase::Backward)?;
        Ok(g)
    }

    /// Whether input `slot` of `rec` needs a gradient.
    fn wants(&self, rec: &Record, slot: usize) -> bool {
        self.requires_grad[rec.inputs[slot].index()]
    }

    /// The backward ops of one forward op, given its output's gradient (`None` only for
    /// the loss's cross-entropy, whose incoming gradient is implicitly 1).
    fn backward(&mut self, rec: &Record, dy: Option<Var>) -> R<Vec<Contribution>> {
        if rec.rule == Rule::CrossEntropy {
            return self.cross_entropy_backward(rec);
        }
        let Some(dy) = dy else {
            return Ok(Vec::new());
        };
        match &rec.rule {
            Rule::MatMul { transpose_b } => self.matmul_backward(rec, dy, *transpose_b),
            Rule::BatchedMatMul {
                transpose_a,
                transpose_b,
            } => self.bmm_backward(rec, dy, *transpose_a, *transpose_b),
            Rule::BiasAdd { axis } => self.bias_add_backward(rec, dy, *axis),
            Rule::Add => Ok((0..2)
                .filter(|&s| self.wants(rec, s))
                .map(|s| (s, dy))
                .collect()),
            Rule::Mul => self.mul_backward(rec, dy),
            Rule::Relu => self.elementwise_backward(rec, dy, OpKind::ReluGrad, rec.outputs[0], 1.0),
            Rule::Gelu => self.elementwise_backward(rec, dy, OpKind::GeluGrad, rec.inputs[0], 16.0),
            Rule::Conv2d { stride, padding } => self.conv_backward(rec, dy, *stride, *padding),
            Rule::MaxPool2d {
                kernel,
                stride,
                padding,
            } => {
                let attrs = json!({ "kernel": kernel, "stride": stride, "padding": padding });
                let op = self.single(
                    rec,
                    OpKind::MaxPool2dGrad,
                    vec![rec.inputs[0], dy],
                    rec.flops,
                );
                self.one(rec, op.attrs(attrs))
            }
            Rule::GlobalAvgPool => {
                let s = self.shape(rec.inputs[0]).to_vec();
                let attrs = json!({ "height": s[2], "width": s[3] });
                let op = self.single(rec, OpKind::GlobalAvgPoolGrad, vec![dy], numel(&s) as f64);
                self.one(rec, op.attrs(attrs))
            }
            Rule::BatchNorm => self.norm_backward(rec, dy, OpKind::BatchNormGrad),
            Rule::LayerNorm => self.norm_backward(rec, dy, OpKind::LayerNormGrad),
            Rule::Softmax { scale } => {
                let flops = 4.0 * numel(self.shape(dy)) as f64;
                let op = self.single(rec, OpKind::SoftmaxGrad, vec![rec.outputs[0], dy], flops);
                self.one(rec, op.attrs(json!({ "scale": scale })).inplace(0, 1))
            }
            Rule::Embedding => self.embedding_backward(rec, dy),
            Rule::Reshape => {
                let name = format!("{}.grad_input", rec.name);
                let g = self.view(&name, dy, self.shape(rec.inputs[0]).to_vec())?;
                self.push(
                    NewOp::new(&name, OpKind::Reshape, vec![dy], vec![g], 0.0),
                    Phase::Backward,
                )?;
                Ok(vec![(0, g)])
            }
            Rule::Transpose { perm } => {
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                let flops = numel(self.shape(dy)) as f64;
                let op = self.single(rec, OpKind::Transpose, vec![dy], flops);
                self.one(rec, op.attrs(json!({ "perm": inverse })))
            }
            Rule::Concat { axis } => self.concat_backward(rec, dy, *axis),
            Rule::Upsample2x => {
                let flops = numel(self.shape(dy)) as f64;
                let op = self.single(rec, OpKind::Upsample2xGrad, vec![dy], flops);
                self.one(rec, op)
            }
            Rule::Dropout { scale } => {
                let flops = numel(self.shape(dy)) as f64;
                let mask = rec.outputs[1];
                let op = self.single(rec, OpKind::AtenDropoutBackward, vec![dy, mask], flops);
                self.one(rec, op.attrs(json!({ "scale": scale })))
            }
            Rule::CrossEntropy => self.cross_entropy_backward(rec),
        }
    }

    /// A backward op `<name>.grad_input` (outputs filled in by [`Self::one`]).
    fn single(&self, rec: &Record, kind: OpKind, inputs: Vec<Var>, flops: f64) -> NewOp {
        NewOp::new(
            &format!("{}.grad_input", rec.name),
            kind,
            inputs,
            vec![],
            flops,
        )
    }

    /// Emits `op` as the gradient of input 0, if input 0 needs one.
    fn one(&mut self, rec: &Record, op: NewOp) -> R<Vec<Contribution>> {
        if !self.wants(rec, 0) {
            return Ok(Vec::new());
        }
        Ok(vec![(0, self.grad_op(op, rec.inputs[0])?)])
    }

    fn elementwise_backward(
        &mut self,
        rec: &Record,
        dy: Var,
        kind: OpKind,
        saved: Var,
        per_elem: f64,
    ) -> R<Vec<Contribution>> {
        let flops = per_elem * numel(self.shape(dy)) as f64;
        let op = self.single(rec, kind, vec![saved, dy], flops).inplace(0, 1);
        self.one(rec, op)
    }

    fn cross_entropy_backward(&mut self, rec: &Record) -> R<Vec<Contribution>> {
        let (logits, labels) = (rec.inputs[0], rec.inputs[1]);
        let op = self.single(
            rec,
            OpKind::CrossEntropyGrad,
            vec![logits, labels],
            rec.flops,
        );
        self.one(rec, op.attrs(json!({ "reduction": "mean" })))
    }

    fn matmul_backward(&mut self, rec: &Record, dy: Var, tb: bool) -> R<Vec<Contribution>> {
        let (a, b) = (rec.inputs[0], rec.inputs[1]);
        let mut out = Vec::new();
        if self.wants(rec, 0) {
            let op = self.single(rec, OpKind::MatMul, vec![dy, b], rec.flops);
            out.push((0, self.grad_op(op.attrs(json!({ "transpose_b": !tb })), a)?));
        }
        if self.wants(rec, 1) {
            let name = format!("{}.grad_weight", rec.name);
            let inputs = if tb { vec![dy, a] } else { vec![a, dy] };
            let op = NewOp::new(&name, OpKind::MatMulTn, inputs, vec![], rec.flops);
            out.push((1, self.grad_op(op, b)?));
        }
        Ok(out)
    }

    fn bmm_backward(&mut self, rec: &Record, dy: Var, ta: bool, tb: bool) -> R<Vec<Contribution>> {
        let (a, b) = (rec.inputs[0], rec.inputs[1]);
        let mut out = Vec::new();
        if self.wants(rec, 0) {
            // d op_a(a) = dy @ op_b(b)^T; transposed back when a was.
            let (inputs, fa, fb) = if ta {
                (vec![b, dy], tb, true)
            } else {
                (vec![dy, b], false, !tb)
            };
            out.push((0, self.bmm_grad(rec, "grad_a", inputs, fa, fb, a)?));
        }
        if self.wants(rec, 1) {
            // d op_b(b) = op_a(a)^T @ dy; transposed back when b was.
            let (inputs, fa, fb) = if tb {
                (vec![dy, a], true, ta)
            } else {
                (vec![a, dy], !ta, false)
            };
            out.push((1, self.bmm_grad(rec, "grad_b", inputs, fa, fb, b)?));
        }
        Ok(out)
    }

    fn bmm_grad(
        &mut self,
        rec: &Record,
        suffix: &str,
        inputs: Vec<Var>,
        ta: bool,
        tb: bool,
        like: Var,
    ) -> R<Var> {
        let name = format!("{}.{suffix}", rec.name);
        let op = NewOp::new(&name, OpKind::BatchedMatMul, inputs, vec![], rec.flops)
            .attrs(json!({ "transpose_a": ta, "transpose_b": tb }));
        self.grad_op(op, like)
    }

    fn bias_add_backward(&mut self, rec: &Record, dy: Var, axis: usize) -> R<Vec<Contribution>> {
        let mut out = Vec::new();
        if self.wants(rec, 0) {
            out.push((0, dy));
        }
        if self.wants(rec, 1) {
            let name = format!("{}.grad_bias", rec.name);
            let flops = numel(self.shape(dy)) as f64;
            let op = NewOp::new(&name, OpKind::BiasAddGrad, vec![dy], vec![], flops)
                .attrs(json!({ "axis": axis }));
            out.push((1, self.grad_op(op, rec.inputs[1])?));
        }
        Ok(out)
    }

    fn mul_backward(&mut self, rec: &Record, dy: Var) -> R<Vec<Contribution>> {
        let (a, b) = (rec.inputs[0], rec.inputs[1]);
        let mut out = Vec::new();
        for (slot, suffix, other) in [(0, "grad_a", b), (1, "grad_b", a)] {
            if self.wants(rec, slot) {
                let name = format!("{}.{suffix}", rec.name);
                let op = NewOp::new(&name, OpKind::Mul, vec![dy, other], vec![], rec.flops);
                out.push((slot, self.grad_op(op, rec.inputs[slot])?));
            }
        }
        Ok(out)
    }

    fn conv_backward(&mut self, rec: &Record, dy: Var, s: u64, p: u64) -> R<Vec<Contribution>> {
        let (x, w) = (rec.inputs[0], rec.inputs[1]);
        let attrs = json!({ "stride": s, "padding": p });
        let mut out = Vec::new();
        if self.wants(rec, 0) {
            let op = self.single(rec, OpKind::Conv2dGradInput, vec![dy, w], rec.flops);
            out.push((0, self.grad_op(op.attrs(attrs.clone()), x)?));
        }
        if self.wants(rec, 1) {
            let name = format!("{}.grad_weight", rec.name);
            let op = NewOp::new(
                &name,
                OpKind::Conv2dGradWeight,
                vec![x, dy],
                vec![],
                rec.flops,
            );
            out.push((1, self.grad_op(op.attrs(attrs), w)?));
        }
        Ok(out)
    }

    /// `batch_norm_grad` / `layer_norm_grad`: one op `<name>.grad` reading the input,
    /// gamma, the saved statistics and dy, writing dx, dgamma and dbeta.
    fn norm_backward(&mut self, rec: &Record, dy: Var, kind: OpKind) -> R<Vec<Contribution>> {
        let (x, gamma, beta) = (rec.inputs[0], rec.inputs[1], rec.inputs[2]);
        let (mean, spread) = (rec.outputs[1], rec.outputs[2]);
        let mut outs = Vec::new();
        for (suffix, like) in [
            ("grad_input", x),
            ("grad_gamma", gamma),
            ("grad_beta", beta),
        ] {
            outs.push(self.activation_like(&format!("{}.{suffix}", rec.name), like)?);
        }
        let name = format!("{}.grad", rec.name);
        let flops = 12.0 * numel(self.shape(x)) as f64;
        let op = NewOp::new(
            &name,
            kind,
            vec![x, gamma, mean, spread, dy],
            outs.clone(),
            flops,
        );
        self.push(op, Phase::Backward)?;
        Ok((0..3)
            .filter(|&s| self.wants(rec, s))
            .map(|s| (s, outs[s]))
            .collect())
    }

    fn embedding_backward(&mut self, rec: &Record, dy: Var) -> R<Vec<Contribution>> {
        let (ids, weight) = (rec.inputs[0], rec.inputs[1]);
        if !self.wants(rec, 1) {
            return Ok(Vec::new());
        }
        let name = format!("{}.grad_weight", rec.name);
        let v = self.shape(weight)[0];
        let flops = numel(self.shape(dy)) as f64;
        let op = NewOp::new(&name, OpKind::EmbeddingGrad, vec![ids, dy], vec![], flops)
            .attrs(json!({ "num_embeddings": v }));
        Ok(vec![(1, self.grad_op(op, weight)?)])
    }

    fn concat_backward(&mut self, rec: &Record, dy: Var, axis: usize) -> R<Vec<Contribution>> {
        let mut out = Vec::new();
        let mut start = 0;
        for (slot, &x) in rec.inputs.iter().enumerate() {
            let end = start + self.shape(x)[axis];
            if self.wants(rec, slot) {
                let name = format!("{}.grad_input{slot}", rec.name);
                let flops = numel(self.shape(x)) as f64;
                let op = NewOp::new(&name, OpKind::Slice, vec![dy], vec![], flops)
                    .attrs(json!({ "axis": axis, "start": start, "end": end }));
                out.push((slot, self.grad_op(op, x)?));
            }
            start = end;
        }
        Ok(out)
    }
}
