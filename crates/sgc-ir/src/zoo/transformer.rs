//! GPT-style decoders: `gpt2` (GPT-2 small) and `tiny_transformer`. Pre-LN blocks,
//! learned positions, causal self-attention through `softmax`'s `causal` and `scale`
//! attributes (no mask tensor), GELU MLP of width 4d, final layer norm, LM head tied to
//! the token embedding (`matmul` with `transpose_b`).

use super::layers::{dense, ln, R};
use super::meta;
use crate::train::{TrainBuilder, Var};
use crate::{DType, Graph};

struct Config {
    model: &'static str,
    layers: usize,
    heads: u64,
    d: u64,
    seq: u64,
    vocab: u64,
    batch: u64,
}

/// GPT-2 small: 12 layers, d=768, 12 heads, seq 1024, vocab 50257 (the zoo file: batch 8).
pub(super) fn gpt2(batch: u64) -> R<Graph> {
    decoder(&Config {
        model: "gpt2",
        layers: 12,
        heads: 12,
        d: 768,
        seq: 1024,
        vocab: 50257,
        batch,
    })
}

/// GPT-2 small's blocks stacked `layers` deep (128 layers: about 10,600 ops).
pub(super) fn gpt2_deep(layers: usize, batch: u64) -> R<Graph> {
    decoder(&Config {
        model: "gpt2_deep",
        layers,
        heads: 12,
        d: 768,
        seq: 1024,
        vocab: 50257,
        batch,
    })
}

/// 2 layers, 2 heads, d=16, seq 8, vocab 32 (the zoo file: batch 2).
pub(super) fn tiny_transformer(batch: u64) -> R<Graph> {
    decoder(&Config {
        model: "tiny_transformer",
        layers: 2,
        heads: 2,
        d: 16,
        seq: 8,
        vocab: 32,
        batch,
    })
}

fn decoder(c: &Config) -> R<Graph> {
    let mut b = TrainBuilder::new(c.model);
    let tokens = b.input("tokens", DType::I64, &[c.batch, c.seq], Some(0))?;
    let positions = b.input("positions", DType::I64, &[c.batch, c.seq], Some(0))?;
    let labels = b.input("labels", DType::I64, &[c.batch, c.seq], Some(0))?;
    let wte = b.param("wte.weight", &[c.vocab, c.d])?;
    let wpe = b.param("wpe.weight", &[c.seq, c.d])?;
    let tok = b.embedding("wte", tokens, wte)?;
    let pos = b.embedding("wpe", positions, wpe)?;
    let mut h = b.add("embed", tok, pos)?;
    for i in 0..c.layers {
        h = block(&mut b, c, &format!("h.{i}"), h)?;
    }
    h = ln(&mut b, "ln_f", h)?;
    let logits = b.matmul("lm_head", h, wte, true)?;
    let loss = b.cross_entropy("loss", logits, labels)?;
    b.finish(loss, meta(c.model, c.batch))
}

/// `x + attn(ln_1(x))`, then `+ mlp(ln_2(.))`.
fn block(b: &mut TrainBuilder, c: &Config, name: &str, x: Var) -> R<Var> {
    let a = ln(b, &format!("{name}.ln_1"), x)?;
    let a = attention(b, c, &format!("{name}.attn"), a)?;
    let x = b.add(&format!("{name}.add_1"), x, a)?;
    let m = ln(b, &format!("{name}.ln_2"), x)?;
    let m = dense(b, &format!("{name}.mlp.c_fc"), m, 4 * c.d, true)?;
    let m = b.gelu(&format!("{name}.mlp.gelu"), m)?;
    let m = dense(b, &format!("{name}.mlp.c_proj"), m, c.d, true)?;
    b.add(&format!("{name}.add_2"), x, m)
}

/// Causal multi-head self-attention on `[B, T, d]`.
fn attention(b: &mut TrainBuilder, c: &Config, name: &str, x: Var) -> R<Var> {
    let hd = c.d / c.heads;
    let mut heads = Vec::new();
    for p in ["q", "k", "v"] {
        let proj = dense(b, &format!("{name}.{p}"), x, c.d, true)?;
        let split = b.reshape(
            &format!("{name}.{p}.split"),
            proj,
            &[c.batch, c.seq, c.heads, hd],
        )?;
        heads.push(b.transpose(&format!("{name}.{p}.heads"), split, &[0, 2, 1, 3])?);
    }
    let scores = b.batched_matmul(&format!("{name}.scores"), heads[0], heads[1], false, true)?;
    let scale = 1.0 / (hd as f64).sqrt();
    let probs = b.softmax(&format!("{name}.softmax"), scores, scale, true)?;
    let ctx = b.batched_matmul(&format!("{name}.context"), probs, heads[2], false, false)?;
    let ctx = b.transpose(&format!("{name}.merge"), ctx, &[0, 2, 1, 3])?;
    let ctx = b.reshape(&format!("{name}.merged"), ctx, &[c.batch, c.seq, c.d])?;
    dense(b, &format!("{name}.c_proj"), ctx, c.d, true)
}
