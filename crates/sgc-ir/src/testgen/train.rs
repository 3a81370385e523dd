//! Random training steps that the CPU backend runs (the graphs of [`super::random_graph`]
//! use opaque op types, made to be planned, not run).
//!
//! [`random_train_graph`] describes a random forward pass to the training-graph builder
//! ([`crate::train::TrainBuilder`]), which adds the backward and the SGD updates, so every op
//! is a real op type with shapes the executor runs. Activations are `[batch, width]`
//! matrices; each layer reads the chain's head or, sometimes, any earlier activation (a skip
//! connection; a layer that merges two of them closes a DAG) and is one of:
//! - `linear` (a new weight, a tied one of the same shape, an optional bias), `relu`,
//!   `gelu`, `softmax`;
//! - `add`, `mul` or `concat` of the head and another activation (sometimes the head
//!   itself, read twice);
//! - `layer_norm` or `batch_norm`, ops with several outputs (their statistics);
//! - `dropout`, which draws random numbers (never recomputed) and has a mask output;
//! - a view: `reshape` to another shape, sometimes an op on the view, `reshape` back;
//! - a `transpose` and back (copies);
//! - sometimes also a dead branch (an op whose output nothing reads).
//!
//! Activations that no later layer read are concatenated onto the head before the loss
//! (a `linear` to 2 to 4 classes and `cross_entropy` against integer labels), so every
//! parameter reaches the loss. The graph's outputs are the loss and every parameter's
//! gradient; each `sgd_update` writes its parameter in place. Everything is drawn from
//! [`SplitMix64`] seeded by the caller.

use super::SplitMix64;
use crate::train::{TrainBuilder, TrainError, Var};
use crate::{DType, Graph};

/// Size and shape knobs of [`random_train_graph`]; probabilities are per layer.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainGenConfig {
    /// Forward layers, drawn from `min_layers..=max_layers`.
    pub min_layers: usize,
    pub max_layers: usize,
    /// Batch size, drawn from `1..=max_batch`.
    pub max_batch: u64,
    /// Width of the input and of a `linear`'s output, drawn from `1..=max_width`.
    pub max_width: u64,
    /// The layer reads an earlier activation rather than the head.
    pub skip_prob: f64,
    /// A weight of the same shape is reused (tied) rather than a new one made.
    pub tie_prob: f64,
    /// An extra op whose output nothing reads.
    pub dead_prob: f64,
}

impl Default for TrainGenConfig {
    /// Small steps (1 to 10 layers, widths up to 6, batches up to 4) that run in
    /// milliseconds.
    fn default() -> Self {
        TrainGenConfig {
            min_layers: 1,
            max_layers: 10,
            max_batch: 4,
            max_width: 6,
            skip_prob: 0.25,
            tie_prob: 0.3,
            dead_prob: 0.1,
        }
    }
}

/// A random training step the CPU backend runs (see the module docs). Panics only if the
/// generator itself is wrong.
pub fn random_train_graph(seed: u64, cfg: &TrainGenConfig) -> Graph {
    TrainGen::new(seed, cfg)
        .build()
        .unwrap_or_else(|e| panic!("train testgen seed {seed}: {e}"))
}

type R<T> = Result<T, TrainError>;

struct TrainGen<'c> {
    rng: SplitMix64,
    cfg: &'c TrainGenConfig,
    b: TrainBuilder,
    batch: u64,
    /// Every `[batch, width]` activation, and whether a later op read it.
    pool: Vec<(Var, bool)>,
    params: Vec<Var>,
    /// Names made so far (op and tensor names share it).
    count: usize,
}

impl<'c> TrainGen<'c> {
    fn new(seed: u64, cfg: &'c TrainGenConfig) -> Self {
        let mut rng = SplitMix64::new(seed);
        let batch = rng.range(1, cfg.max_batch.max(1));
        TrainGen {
            rng,
            cfg,
            b: TrainBuilder::new(&format!("train-gen-{seed:016x}")),
            batch,
            pool: Vec::new(),
            params: Vec::new(),
            count: 0,
        }
    }

    fn build(mut self) -> R<Graph> {
        let width = self.width();
        let x = self
            .b
            .input("x", DType::F32, &[self.batch, width], Some(0))?;
        let labels = self.b.input("labels", DType::I64, &[self.batch], Some(0))?;
        self.pool.push((x, false));
        let layers = self.rng.range(
            self.cfg.min_layers.max(1) as u64,
            self.cfg.max_layers.max(1) as u64,
        );
        for _ in 0..layers {
            let y = self.layer()?;
            self.pool.push((y, false));
            if self.rng.chance(self.cfg.dead_prob) {
                self.dead_branch()?;
            }
        }
        let head = self.merge_unread()?;
        let classes = self.rng.range(2, 4);
        let logits = self.linear(head, classes)?;
        let name = self.name("loss");
        let loss = self.b.cross_entropy(&name, logits, labels)?;
        self.b.finish(loss, serde_json::Map::new())
    }

    fn width(&mut self) -> u64 {
        self.rng.range(1, self.cfg.max_width.max(1))
    }

    fn name(&mut self, what: &str) -> String {
        self.count += 1;
        format!("{what}{}", self.count)
    }

    fn cols(&self, v: Var) -> u64 {
        self.b.shape(v)[1]
    }

    /// Marks pool entry `i` read and returns it.
    fn take(&mut self, i: usize) -> Var {
        self.pool[i].1 = true;
        self.pool[i].0
    }

    /// The head, or sometimes an earlier activation.
    fn operand(&mut self) -> Var {
        let last = self.pool.len() - 1;
        let i = if self.rng.chance(self.cfg.skip_prob) {
            self.rng.index(self.pool.len())
        } else {
            last
        };
        self.take(i)
    }

    /// An activation with `v`'s shape other than `v` (made by a `linear` when none is in
    /// the pool), or sometimes `v` itself.
    fn partner(&mut self, v: Var) -> R<Var> {
        if self.rng.chance(0.15) {
            return Ok(v);
        }
        let cols = self.cols(v);
        let same: Vec<usize> = (0..self.pool.len())
            .filter(|&i| self.pool[i].0 != v && self.cols(self.pool[i].0) == cols)
            .collect();
        if same.is_empty() {
            let i = self.rng.index(self.pool.len());
            let from = self.take(i);
            return self.linear(from, cols);
        }
        let i = *self.rng.pick(&same);
        Ok(self.take(i))
    }

    fn layer(&mut self) -> R<Var> {
        let x = self.operand();
        if self.cols(x) > 4 * self.cfg.max_width.max(1) {
            let w = self.width();
            return self.linear(x, w);
        }
        let name = self.name("l");
        match self.rng.below(12) {
            0 | 1 => {
                let w = self.width();
                self.linear(x, w)
            }
            2 => self.b.relu(&name, x),
            3 => self.b.gelu(&name, x),
            4 => self.b.softmax(&name, x, *self.rng.pick(&[1.0, 0.5]), false),
            5 => {
                let y = self.partner(x)?;
                self.b.add(&name, x, y)
            }
            6 => {
                let y = self.partner(x)?;
                self.b.mul(&name, x, y)
            }
            7 => {
                let i = self.rng.index(self.pool.len());
                let y = self.take(i);
                self.b.concat(&name, &[x, y], 1)
            }
            8 => self.norm(&name, x),
            9 => self.b.dropout(&name, x, *self.rng.pick(&[0.1, 0.5])),
            10 => self.view_and_back(&name, x),
            _ => self.transpose_and_back(&name, x),
        }
    }

    /// `x @ w (+ bias)` to `cols` columns, `w` new or tied.
    fn linear(&mut self, x: Var, cols: u64) -> R<Var> {
        let shape = [self.cols(x), cols];
        let tied: Vec<Var> = (self.params.iter().copied())
            .filter(|&p| self.b.shape(p) == shape)
            .collect();
        let w = if !tied.is_empty() && self.rng.chance(self.cfg.tie_prob) {
            *self.rng.pick(&tied)
        } else {
            self.param(&shape)?
        };
        let bias = if self.rng.chance(0.5) {
            Some(self.param(&[cols])?)
        } else {
            None
        };
        let name = self.name("fc");
        self.b.linear(&name, x, w, bias)
    }

    fn param(&mut self, shape: &[u64]) -> R<Var> {
        let name = self.name("p");
        let p = self.b.param(&name, shape)?;
        self.params.push(p);
        Ok(p)
    }

    /// `layer_norm` or `batch_norm` (statistics as extra outputs).
    fn norm(&mut self, name: &str, x: Var) -> R<Var> {
        let c = self.cols(x);
        let gamma = self.param(&[c])?;
        let beta = self.param(&[c])?;
        if self.rng.chance(0.5) {
            self.b.layer_norm(name, x, gamma, beta)
        } else {
            self.b.batch_norm(name, x, gamma, beta)
        }
    }

    /// A `reshape` view of `x` (flat, transposed shape or an extra axis), sometimes an
    /// element-wise op on it, and a `reshape` back to `[batch, width]`.
    fn view_and_back(&mut self, name: &str, x: Var) -> R<Var> {
        let (n, c) = (self.batch, self.cols(x));
        let shape = self
            .rng
            .pick(&[vec![n * c], vec![c, n], vec![n, c, 1]])
            .clone();
        let mut v = self.b.reshape(name, x, &shape)?;
        if self.rng.chance(0.5) {
            let act = self.name("l");
            v = self.b.relu(&act, v)?;
        }
        let back = self.name("l");
        self.b.reshape(&back, v, &[n, c])
    }

    /// A `transpose` of `x`, sometimes an element-wise op on it, and a `transpose` back.
    fn transpose_and_back(&mut self, name: &str, x: Var) -> R<Var> {
        let mut t = self.b.transpose(name, x, &[1, 0])?;
        if self.rng.chance(0.5) {
            let act = self.name("l");
            t = self.b.gelu(&act, t)?;
        }
        let back = self.name("l");
        self.b.transpose(&back, t, &[1, 0])
    }

    /// An op without parameters on a pool entry, whose output nothing reads.
    fn dead_branch(&mut self) -> R<()> {
        let i = self.rng.index(self.pool.len());
        let x = self.pool[i].0;
        let name = self.name("dead");
        match self.rng.below(3) {
            0 => self.b.relu(&name, x)?,
            1 => self.b.softmax(&name, x, 1.0, false)?,
            _ => self.b.dropout(&name, x, 0.5)?,
        };
        Ok(())
    }

    /// The head with every activation no layer read concatenated onto it.
    fn merge_unread(&mut self) -> R<Var> {
        let (mut head, _) = self.pool.pop().expect("the input is in the pool");
        let unread: Vec<Var> = self.pool.iter().filter(|e| !e.1).map(|e| e.0).collect();
        for v in unread {
            let name = self.name("merge");
            head = self.b.concat(&name, &[head, v], 1)?;
        }
        Ok(head)
    }
}
