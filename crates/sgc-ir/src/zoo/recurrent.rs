//! `lstm_deep`: an LSTM-like language model unrolled over a long sequence, for the
//! planner's scaling benchmark (recurrent traces have many small tensors and long chains of
//! state, the slow case of the search).
//!
//! One cell per time step, its weights shared by every step: the four gates are
//! `act(x_t W_x + b + h_{t-1} W_h)`, then `c_t = f * c_{t-1} + i * g` and
//! `h_t = o * act(c_t)`. The builder has no sigmoid or tanh, so GELU stands in for both: the
//! memory picture (what is saved for the backward pass, and its sizes) is an LSTM's. The
//! hidden states of all steps are concatenated and read by one linear head and a
//! cross-entropy loss, as a language model's are.

use super::layers::{dense, R};
use super::meta;
use crate::train::{TrainBuilder, Var};
use crate::{DType, Graph};

/// Hidden and embedding width.
const HIDDEN: u64 = 256;
/// Vocabulary size.
const VOCAB: u64 = 1000;

/// The gates of one cell: input, forget, output, candidate.
const GATES: [&str; 4] = ["i", "f", "o", "g"];

/// The unrolled model over `steps` time steps at `batch`.
pub(super) fn lstm_deep(steps: usize, batch: u64) -> R<Graph> {
    let mut b = TrainBuilder::new("lstm_deep");
    let d = HIDDEN;
    let embed = b.param("embed.weight", &[VOCAB, d])?;
    let mut wx = Vec::new();
    let mut wh = Vec::new();
    let mut bias = Vec::new();
    for gate in GATES {
        wx.push(b.param(&format!("cell.w_x{gate}"), &[d, d])?);
        wh.push(b.param(&format!("cell.w_h{gate}"), &[d, d])?);
        bias.push(b.param(&format!("cell.b_{gate}"), &[d])?);
    }
    let mut h = b.input("h0", DType::F32, &[batch, d], Some(0))?;
    let mut c = b.input("c0", DType::F32, &[batch, d], Some(0))?;
    let mut outs = Vec::with_capacity(steps);
    for t in 0..steps {
        let tokens = b.input(&format!("tokens.{t}"), DType::I64, &[batch], Some(0))?;
        let x = b.embedding(&format!("t{t}.embed"), tokens, embed)?;
        let mut gates: Vec<Var> = Vec::with_capacity(4);
        for (k, gate) in GATES.iter().enumerate() {
            let name = format!("t{t}.{gate}");
            let zx = b.linear(&format!("{name}.x"), x, wx[k], Some(bias[k]))?;
            let zh = b.matmul(&format!("{name}.h"), h, wh[k], false)?;
            let z = b.add(&format!("{name}.sum"), zx, zh)?;
            gates.push(b.gelu(&format!("{name}.act"), z)?);
        }
        let (i, f, o, g) = (gates[0], gates[1], gates[2], gates[3]);
        let keep = b.mul(&format!("t{t}.keep"), f, c)?;
        let write = b.mul(&format!("t{t}.write"), i, g)?;
        c = b.add(&format!("t{t}.c"), keep, write)?;
        let squashed = b.gelu(&format!("t{t}.c_act"), c)?;
        h = b.mul(&format!("t{t}.h"), o, squashed)?;
        outs.push(h);
    }
    let all = b.concat("hidden", &outs, 0)?;
    let logits = dense(&mut b, "head", all, VOCAB, true)?;
    let total = batch.saturating_mul(steps as u64);
    let labels = b.input("labels", DType::I64, &[total], Some(0))?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta("lstm_deep", batch))
}
