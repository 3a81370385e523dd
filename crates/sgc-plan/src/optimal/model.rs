//! The stage model of Checkmate (Jain et al., MLSys 2020) over sgc's memory model, as a
//! mixed-integer program, without a solver: columns, rows and the maps between a schedule
//! and a point of the program.
//!
//! A schedule in *stage form* runs stage `t = 0..n` in order: stage `t` recomputes some ops
//! `i < t`, in traced order, then runs op `t` for the first time. Variables:
//! - `R[t][i]`: op `i` runs in stage `t` (`R[t][t] = 1`; `i < t` only for an op that may be
//!   recomputed there: rerunnable, and not after a non-recomputable op that reads one of its
//!   persistent inputs has run, the verifier's rule, `Context::dirty_at`);
//! - `P[t][x]`: value `x` is present when stage `t` starts. A value is a storage (an
//!   activation root or a graph input, with its bytes) or a view (an alias tensor, no
//!   bytes): a view is valid only while its storage is present, and a reader of a view needs
//!   the view's op to have run since the storage was made;
//! - `F[t][x][k]`: storage `x` is freed after op `k` of stage `t`: `k` touches it (reads it,
//!   reads a view of it or makes it), no later op of the stage touches it, and it is not
//!   present at stage `t + 1`;
//! - `A[t][k]`: non-persistent bytes resident while op `k` of stage `t` runs, `<=` the cap.
//!
//! Rows: an op that runs has its inputs (each made earlier in the stage or present at its
//! start); a value present at `t + 1` was present at `t` or made in stage `t`; no op runs
//! while one of its values is present (its readers all come after it in the stage, so the
//! old copy would be dead: sgc's memory model ends it before the new one starts); graph
//! outputs are present at the end (one may be freed and made again in between, as in
//! sgc's memory model); the `A` chain adds the bytes an op
//! makes and subtracts the bytes freed after the previous op; and, implied at every point
//! but not in the linear relaxation, each stage's own op runs with at least the storages it
//! touches and those present at the next stage that were made before it (the residency
//! rows: they hold the relaxation to the cut bound of [`crate::bound`]), and a stage frees a
//! storage at most once, and only one present at its start or made in it (the free-once
//! rows). The objective is the cost of every run with `i < t`, as a share of one step.
//!
//! The program's bytes are at least the memory model's at every step (a present value no
//! op of the stage touches is still counted), and equal for the schedule's own frees, so a
//! point within the cap is a schedule whose peak is within it, and every stage-form
//! schedule whose peak is within the cap is a point ([`Model::point_of`]). The optimum is
//! therefore the least recompute over stage-form schedules, which is what every strategy
//! of sgc makes: first runs in the traced order.

use crate::context::{Context, NO_HAZARD};
use sgc_ir::{OpId, TensorId};

/// One column: bounds, objective coefficient, whether it is integer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Column {
    pub lo: f64,
    pub hi: f64,
    pub cost: f64,
    pub integer: bool,
}

/// One row: `lo <= sum(coef * column) <= hi`.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub lo: f64,
    pub hi: f64,
    pub terms: Vec<(usize, f64)>,
}

/// A value of the model (see the module doc).
#[derive(Clone, Debug)]
struct Value {
    bytes: u64,
    /// The op that makes it (`None`: a graph input, present from the start).
    producer: Option<usize>,
    /// For a view: the storage it is a view of (`None`: a storage, or a view of persistent
    /// storage).
    base: Option<usize>,
    /// Present at the end of the step (a graph output).
    kept: bool,
    /// The first and last stage at which `P` is a variable.
    first: usize,
    last: usize,
    /// Where its `P` columns start (`first..=last`).
    p_at: usize,
}

/// The program and the tables to read a point of it.
pub(crate) struct Model {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    n: usize,
    values: Vec<Value>,
    /// Per op: the last stage at which it may be recomputed (`< i + 1`: never).
    last_rerun: Vec<usize>,
    /// Per op: where its `R` columns start (stages `i + 1..=last_rerun[i]`).
    r_at: Vec<usize>,
    /// Per op: the values it reads, the storages it touches, the values it makes.
    reads: Vec<Vec<usize>>,
    touches: Vec<Vec<usize>>,
    makes: Vec<Vec<usize>>,
    /// Per stage: the ops that may run in it, in order (the last is the stage's own op).
    runnable: Vec<Vec<usize>>,
    /// The `F` columns: per stage, per position in `runnable[t]`, the storages that may be
    /// freed after that op, each with its column.
    frees: Vec<Vec<Vec<Free>>>,
    /// Per stage: where its `A` columns start (one per runnable op).
    a_at: Vec<usize>,
    /// Bytes per unit of the memory rows: the cap is a million units, so that HiGHS's
    /// absolute tolerances (1e-6) are far below one byte.
    unit: f64,
}

/// What the program refuses to model.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Unmodelled {
    /// The program would have more columns than this.
    TooLarge { columns: usize, limit: usize },
}

impl Model {
    /// The program for `ctx` with `cap` non-persistent bytes, or why it is not built.
    pub fn build(ctx: &Context<'_>, cap: u64, max_columns: usize) -> Result<Model, Unmodelled> {
        Self::build_below(ctx, cap, max_columns, f64::INFINITY)
    }

    /// The program with no recomputation of an op whose one run costs more than `dearest`
    /// (a share of one step). Given a schedule within the cap that recomputes `dearest` in
    /// all, this keeps every schedule that recomputes no more: any run of a dearer op alone
    /// costs more. Its optimum, when at most `dearest`, is the whole program's.
    pub fn build_below(
        ctx: &Context<'_>,
        cap: u64,
        max_columns: usize,
        dearest: f64,
    ) -> Result<Model, Unmodelled> {
        let n = ctx.n;
        let mut m = Model {
            columns: Vec::new(),
            rows: Vec::new(),
            n,
            values: Vec::new(),
            last_rerun: vec![0; n],
            r_at: vec![0; n],
            reads: vec![Vec::new(); n],
            touches: vec![Vec::new(); n],
            makes: vec![Vec::new(); n],
            runnable: vec![Vec::new(); n],
            frees: vec![Vec::new(); n],
            a_at: vec![0; n],
            unit: 1.0,
        };
        m.collect_values(ctx, dearest);
        let size = m.size_estimate();
        if size > max_columns {
            return Err(Unmodelled::TooLarge {
                columns: size,
                limit: max_columns,
            });
        }
        m.add_columns(ctx);
        m.add_rows(cap);
        Ok(m)
    }

    /// Values, reads, touches and makes; the stages at which each is a variable and the
    /// ops each stage may run.
    fn collect_values(&mut self, ctx: &Context<'_>, dearest: f64) {
        let g = ctx.g;
        let n = self.n;
        let mut value_of = vec![usize::MAX; g.num_tensors()];
        let mut outputs = vec![false; g.num_tensors()];
        for &t in g.outputs() {
            outputs[t.index()] = true;
        }
        for t in g.tensor_ids() {
            let tensor = g.tensor(t);
            let storage = ctx.root[t.index()] == t && !g.is_persistent(t);
            if !(storage || tensor.alias_of.is_some()) {
                continue;
            }
            value_of[t.index()] = self.values.len();
            self.values.push(Value {
                bytes: if storage { ctx.bytes[t.index()] } else { 0 },
                producer: g.producer(t).map(|o| o.index()),
                base: None,
                kept: outputs[t.index()] || (storage && ctx.kept[t.index()]),
                first: 0,
                last: 0,
                p_at: 0,
            });
        }
        // A view's base is its storage root, not the tensor it was taken from: a view of a
        // view stays valid while the storage is not made again, whether or not the view
        // between them is still held (the verifier's rule: a view is stale only when its
        // storage's version changed).
        for t in g.tensor_ids() {
            let v = value_of[t.index()];
            if v == usize::MAX || g.tensor(t).alias_of.is_none() {
                continue;
            }
            let root = value_of[g.storage_root(t).index()];
            if root != usize::MAX {
                self.values[v].base = Some(root);
            }
        }
        for i in 0..n {
            // The distinct values of some tensors (those that are values).
            let distinct = |tensors: &mut dyn Iterator<Item = &TensorId>| -> Vec<usize> {
                let mut v: Vec<usize> = tensors
                    .map(|t| value_of[t.index()])
                    .filter(|&v| v != usize::MAX)
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            self.reads[i] = distinct(&mut ctx.inputs(i).iter());
            self.touches[i] = distinct(&mut ctx.in_roots[i].iter().chain(&ctx.out_roots[i]));
            self.makes[i] = ctx
                .outputs(i)
                .iter()
                .map(|t| value_of[t.index()])
                .filter(|&v| v != usize::MAX)
                .collect();
        }
        self.stage_ranges(ctx, dearest);
    }

    /// The last stage each op may be recomputed at, and each value's stages.
    fn stage_ranges(&mut self, ctx: &Context<'_>, dearest: f64) {
        let n = self.n;
        let step: f64 = ctx.cost.iter().sum();
        let rerun_limit = |i: usize| -> usize {
            if !ctx.rerunnable[i] || share(ctx.cost[i], step) > dearest {
                return i;
            }
            // The verifier's rule: a recomputation may not read persistent state after a
            // non-recomputable op that reads it has run (it may have written it in place).
            // Its inputs made by other ops are the schedule's to keep or remake.
            let h = ctx.dirty_at[i];
            if h == NO_HAZARD {
                n - 1
            } else {
                (h as usize).clamp(i, n - 1)
            }
        };
        let mut limit: Vec<usize> = (0..n).map(rerun_limit).collect();
        // A value is needed up to the last stage any op touching or reading it may run; an
        // op is worth recomputing only up to the last stage one of its values is needed.
        // The two depend on each other: lower both until neither changes.
        let mut needed = vec![0usize; self.values.len()];
        loop {
            let mut changed = false;
            needed.fill(0);
            for (i, &l) in limit.iter().enumerate() {
                for &x in self.reads[i].iter().chain(&self.touches[i]) {
                    needed[x] = needed[x].max(l);
                }
            }
            for (x, v) in self.values.iter().enumerate() {
                if v.kept {
                    needed[x] = n - 1;
                }
            }
            for (i, l) in limit.iter_mut().enumerate() {
                let worth = self.makes[i].iter().map(|&x| needed[x]).max().unwrap_or(i);
                let lower = (*l).min(worth.max(i));
                changed |= lower != *l;
                *l = lower;
            }
            if !changed {
                break;
            }
        }
        self.last_rerun = limit;
        for (x, v) in self.values.iter_mut().enumerate() {
            v.first = v.producer.map_or(0, |p| p + 1);
            v.last = needed[x];
        }
        for i in 0..n {
            for t in i + 1..=self.last_rerun[i] {
                self.runnable[t].push(i);
            }
        }
        for (t, ops) in self.runnable.iter_mut().enumerate() {
            ops.sort_unstable();
            ops.push(t);
        }
    }

    /// Columns the program will have, before it is built.
    fn size_estimate(&self) -> usize {
        let r: usize = self.runnable.iter().map(|s| s.len()).sum();
        let p: usize = self
            .values
            .iter()
            .map(|v| (v.last + 1).saturating_sub(v.first))
            .sum();
        let f: usize = self
            .runnable
            .iter()
            .map(|s| s.iter().map(|&k| self.touches[k].len()).sum::<usize>())
            .sum();
        2 * r + p + f
    }

    fn column(&mut self, lo: f64, hi: f64, cost: f64, integer: bool) -> usize {
        self.columns.push(Column {
            lo,
            hi,
            cost,
            integer,
        });
        self.columns.len() - 1
    }

    fn add_columns(&mut self, ctx: &Context<'_>) {
        let step: f64 = ctx.cost.iter().sum::<f64>();
        for i in 0..self.n {
            self.r_at[i] = self.columns.len();
            for _ in i + 1..=self.last_rerun[i] {
                self.column(0.0, 1.0, share(ctx.cost[i], step), true);
            }
        }
        for x in 0..self.values.len() {
            self.values[x].p_at = self.columns.len();
            let v = self.values[x].clone();
            for t in v.first..=v.last {
                let fixed = v.producer.is_none() && t == 0;
                self.column(if fixed { 1.0 } else { 0.0 }, 1.0, 0.0, true);
            }
        }
        for t in 0..self.n {
            self.a_at[t] = self.columns.len();
            for _ in 0..self.runnable[t].len() {
                self.column(0.0, f64::INFINITY, 0.0, false);
            }
        }
        for t in 0..self.n {
            let ops = self.runnable[t].clone();
            for (at, &k) in ops.iter().enumerate() {
                let mut frees = Vec::new();
                for x in self.touches[k].clone() {
                    if self.values[x].bytes > 0 && self.may_free(t, x, &ops[at + 1..]) {
                        let col = self.column(0.0, 1.0, 0.0, true);
                        frees.push(Free { value: x, col });
                    }
                }
                self.frees[t].push(frees);
            }
        }
    }

    /// Bytes freed after the op at position `at` of stage `t`, in the rows' unit, at `x`.
    fn freed(&self, t: usize, at: usize, x: &[f64]) -> f64 {
        self.frees[t][at]
            .iter()
            .map(|f| x[f.col] * self.weight(f.value))
            .sum()
    }

    /// Whether storage `x` may be freed in stage `t` after an op followed by `later`: not
    /// a graph output in the last stage, and not touched by the stage's own op after it.
    fn may_free(&self, t: usize, x: usize, later: &[usize]) -> bool {
        let kept_to_the_end = self.values[x].kept && t + 1 == self.n;
        let touched_by_own_op = later
            .iter()
            .any(|&u| u == t && self.touches[u].contains(&x));
        !(kept_to_the_end || touched_by_own_op)
    }

    /// `R[t][i]`: a column, the constant 1 (`i == t`) or the constant 0 (`None`).
    fn r(&self, t: usize, i: usize) -> Option<Term> {
        if i == t {
            Some(Term::One)
        } else if i < t && t <= self.last_rerun[i] {
            Some(Term::Col(self.r_at[i] + (t - i - 1)))
        } else {
            None
        }
    }

    /// `P[t][x]`: a column, or `None` (0) outside the value's stages.
    fn p(&self, t: usize, x: usize) -> Option<usize> {
        let v = &self.values[x];
        (v.first..=v.last)
            .contains(&t)
            .then(|| v.p_at + (t - v.first))
    }

    fn add_rows(&mut self, cap: u64) {
        self.dependency_rows();
        self.presence_rows();
        self.unit = (cap as f64 / 1e6).max(1.0);
        self.memory_rows(cap as f64 / self.unit);
        self.free_rows();
        self.residency_rows();
        self.free_once_rows();
    }

    /// A stage frees a storage at most once, and only one that is there: present at its
    /// start or made in it.
    fn free_once_rows(&mut self) {
        for t in 0..self.n {
            let mut by_value: Vec<Vec<usize>> = vec![Vec::new(); self.values.len()];
            for frees in &self.frees[t] {
                for f in frees {
                    by_value[f.value].push(f.col);
                }
            }
            for (x, cols) in by_value.into_iter().enumerate() {
                if cols.is_empty() {
                    continue;
                }
                let mut row = Lin::default();
                for c in cols {
                    row.add(Some(Term::Col(c)), 1.0);
                }
                row.add(self.p(t, x).map(Term::Col), -1.0);
                if let Some(p) = self.values[x].producer {
                    row.add(self.r(t, p), -1.0);
                }
                self.push(row, f64::NEG_INFINITY, 0.0);
            }
        }
    }

    /// An op that runs has each value it reads: made earlier in the stage or present.
    fn dependency_rows(&mut self) {
        for t in 0..self.n {
            for &k in &self.runnable[t].clone() {
                for &x in &self.reads[k].clone() {
                    let mut row = Lin::default();
                    row.add(self.r(t, k), 1.0);
                    if let Some(p) = self.values[x].producer {
                        row.add(self.r(t, p), -1.0);
                    }
                    row.add(self.p(t, x).map(Term::Col), -1.0);
                    self.push(row, f64::NEG_INFINITY, 0.0);
                }
            }
        }
    }

    /// Presence carries over or is made; views need their base; nothing is remade while
    /// present.
    fn presence_rows(&mut self) {
        for x in 0..self.values.len() {
            let v = self.values[x].clone();
            for t in v.first..=v.last {
                if t > v.first {
                    let mut row = Lin::default();
                    row.add(self.p(t, x).map(Term::Col), 1.0);
                    row.add(self.p(t - 1, x).map(Term::Col), -1.0);
                    if let Some(p) = v.producer {
                        row.add(self.r(t - 1, p), -1.0);
                    }
                    self.push(row, f64::NEG_INFINITY, 0.0);
                }
                if let Some(b) = v.base {
                    let mut row = Lin::default();
                    row.add(self.p(t, x).map(Term::Col), 1.0);
                    row.add(self.p(t, b).map(Term::Col), -1.0);
                    self.push(row, f64::NEG_INFINITY, 0.0);
                }
                if v.kept && t + 1 == self.n {
                    // A graph output is present at the end: kept through the last stage
                    // or made in it.
                    let mut row = Lin::default();
                    row.add(self.p(t, x).map(Term::Col), 1.0);
                    if let Some(p) = v.producer {
                        row.add(self.r(t, p), 1.0);
                    }
                    self.push(row, 1.0, f64::INFINITY);
                }
                if let Some(p) = v.producer {
                    if let Some(Term::Col(r)) = self.r(t, p) {
                        let mut row = Lin::default();
                        row.add(Some(Term::Col(r)), 1.0);
                        row.add(self.p(t, x).map(Term::Col), 1.0);
                        self.push(row, f64::NEG_INFINITY, 1.0);
                    }
                }
            }
        }
    }

    /// The `A` chain of each stage, each within the cap.
    fn memory_rows(&mut self, cap: f64) {
        for t in 0..self.n {
            let ops = self.runnable[t].clone();
            for (at, &k) in ops.iter().enumerate() {
                let a = self.a_at[t] + at;
                let mut row = Lin::default();
                row.add(Some(Term::Col(a)), 1.0);
                let made: f64 = self.makes[k].iter().map(|&x| self.weight(x)).sum();
                row.add(self.r(t, k), -made);
                if at == 0 {
                    for x in 0..self.values.len() {
                        let b = self.weight(x);
                        if b > 0.0 {
                            row.add(self.p(t, x).map(Term::Col), -b);
                        }
                    }
                } else {
                    row.add(Some(Term::Col(a - 1)), -1.0);
                    for f in &self.frees[t][at - 1] {
                        row.add(Some(Term::Col(f.col)), self.weight(f.value));
                    }
                }
                self.push(row, 0.0, 0.0);
                self.columns[a].hi = cap;
            }
        }
    }

    /// A free after op `k` needs `k` to run, no later op of the stage touching the storage,
    /// and the storage absent at the next stage.
    fn free_rows(&mut self) {
        let frees: Vec<(usize, usize, Free)> = (0..self.n)
            .flat_map(|t| {
                let stage = &self.frees[t];
                (0..stage.len()).flat_map(move |at| stage[at].iter().map(move |&f| (t, at, f)))
            })
            .collect();
        for (t, at, Free { value: x, col: c }) in frees {
            let k = self.runnable[t][at];
            let only = |other: Option<Term>, coef: f64, hi: f64| {
                let mut row = Lin::default();
                row.add(Some(Term::Col(c)), 1.0);
                row.add(other, coef);
                (row, hi)
            };
            let mut rows = Vec::new();
            if k < t {
                rows.push(only(self.r(t, k), -1.0, 0.0));
            }
            if let Some(p) = self.p(t + 1, x) {
                rows.push(only(Some(Term::Col(p)), 1.0, 1.0));
            }
            for &u in &self.runnable[t][at + 1..] {
                if self.touches[u].contains(&x) {
                    rows.push(only(self.r(t, u), 1.0, 1.0));
                }
            }
            for (row, hi) in rows {
                self.push(row, f64::NEG_INFINITY, hi);
            }
        }
    }

    /// What is resident while a stage's own op runs, from below: the storages it touches,
    /// and every storage made before it that is present when the next stage starts (made
    /// before the op, not freed until after it). At a point of the program these are
    /// implied (the `A` chain counts at least them), but its linear relaxation may free a
    /// storage in fractions at several ops of a stage, more than was there, and so count
    /// too few bytes. With them the relaxation holds each stage to the cut bound's
    /// argument ([`crate::bound`]): a storage needed later is resident at the op or made
    /// again after it, so its optimum is at least the cut bound at the cap.
    fn residency_rows(&mut self) {
        for t in 0..self.n.saturating_sub(1) {
            let at = self.runnable[t].len() - 1;
            let mut row = Lin::default();
            row.add(Some(Term::Col(self.a_at[t] + at)), 1.0);
            let mut own: Vec<usize> = self.touches[t].clone();
            own.extend(&self.makes[t]);
            own.sort_unstable();
            own.dedup();
            let forced: f64 = own.iter().map(|&x| self.weight(x)).sum();
            for x in 0..self.values.len() {
                let b = self.weight(x);
                if b == 0.0 || own.binary_search(&x).is_ok() {
                    continue;
                }
                row.add(self.p(t + 1, x).map(Term::Col), -b);
            }
            self.push(row, forced, f64::INFINITY);
        }
    }

    /// A value's bytes in the memory rows' unit.
    fn weight(&self, x: usize) -> f64 {
        self.values[x].bytes as f64 / self.unit
    }

    fn push(&mut self, row: Lin, lo: f64, hi: f64) {
        self.rows.push(Row {
            lo: lo - row.constant,
            hi: hi - row.constant,
            terms: row.terms,
        });
    }

    /// The schedule of a point: each stage's runs in order, recomputations flagged.
    #[cfg_attr(not(feature = "optimal"), allow(dead_code))]
    pub fn schedule_of(&self, x: &[f64]) -> Vec<(OpId, bool)> {
        let mut steps = Vec::new();
        for t in 0..self.n {
            for &i in &self.runnable[t] {
                let runs = match self.r(t, i) {
                    Some(Term::One) => true,
                    Some(Term::Col(c)) => x[c] > 0.5,
                    None => false,
                };
                if runs {
                    steps.push((OpId::new(i), i != t));
                }
            }
        }
        steps
    }

    /// The point of a stage-form schedule (`None` when `steps` is not one, or runs an op
    /// at a stage the program does not allow), with every value present at a stage start
    /// exactly when the schedule still needs it there.
    pub fn point_of(&self, steps: &[(OpId, bool)]) -> Option<Vec<f64>> {
        let mut x: Vec<f64> = self.columns.iter().map(|c| c.lo).collect();
        let stages = self.stages_of(steps)?;
        for (t, ops) in stages.iter().enumerate() {
            for &i in ops {
                match self.r(t, i)? {
                    Term::One => {}
                    Term::Col(c) => x[c] = 1.0,
                }
            }
        }
        self.fill_presence(&stages, &mut x)?;
        self.fill_frees(&stages, &mut x);
        Some(x)
    }

    /// The runs of each stage, in order; `None` unless first runs follow the traced
    /// order and no op is recomputed twice in one stage. A stage's recomputations are put
    /// in traced order (still an order that runs: the traced order is topological), which
    /// may change its memory: the caller checks the point against the rows.
    fn stages_of(&self, steps: &[(OpId, bool)]) -> Option<Vec<Vec<usize>>> {
        let mut stages = vec![Vec::new(); self.n];
        let mut t = 0;
        for &(op, recompute) in steps {
            let i = op.index();
            if t >= self.n || (!recompute && i != t) {
                return None;
            }
            stages[t].push(i);
            if !recompute {
                let len = stages[t].len();
                stages[t][..len - 1].sort_unstable();
                if stages[t].windows(2).any(|w| w[0] >= w[1]) {
                    return None;
                }
                t += 1;
            }
        }
        (t == self.n).then_some(stages)
    }

    /// `P` of every value: present at stage `t` when it was present or made before and
    /// some later run (at or after `t`) reads or touches it before it is made again; views
    /// only while their base is and their op ran since the base was made.
    fn fill_presence(&self, stages: &[Vec<usize>], x: &mut [f64]) -> Option<()> {
        // Runs as (stage, op), in order.
        let runs: Vec<(usize, usize)> = stages
            .iter()
            .enumerate()
            .flat_map(|(t, ops)| ops.iter().map(move |&i| (t, i)))
            .collect();
        let mut stage_start = vec![0; self.n + 1];
        for t in 0..self.n {
            stage_start[t + 1] = stage_start[t] + stages[t].len();
        }
        for (v, value) in self.values.iter().enumerate() {
            for t in value.first..=value.last {
                let next = runs[stage_start[t]..]
                    .iter()
                    .find(|&&(_, i)| {
                        Some(i) == value.producer
                            || self.reads[i].contains(&v)
                            || self.touches[i].contains(&v)
                    })
                    .map(|&(_, i)| Some(i) != value.producer);
                // Present when its next event is a read, or, for a graph output, when
                // it is never made again (it stays to the end).
                let present = next == Some(true) || (value.kept && next.is_none());
                if let Some(c) = self.p(t, v) {
                    if present && self.columns[c].hi < 0.5 {
                        return None;
                    }
                    x[c] = if present || self.columns[c].lo > 0.5 {
                        1.0
                    } else {
                        0.0
                    };
                }
            }
        }
        // A view is present only while its base is (a reader after a remade base remakes
        // the view first, so the stricter value is the schedule's own).
        for (v, value) in self.values.iter().enumerate() {
            if let Some(b) = value.base {
                for t in value.first..=value.last {
                    if let (Some(c), Some(cb)) = (self.p(t, v), self.p(t, b)) {
                        x[c] = x[c].min(x[cb]);
                    }
                }
            }
        }
        Some(())
    }

    /// `F` of every free the schedule makes, and the `A` chain.
    fn fill_frees(&self, stages: &[Vec<usize>], x: &mut [f64]) {
        for (t, runs) in stages.iter().enumerate() {
            for (at, &k) in self.runnable[t].iter().enumerate() {
                let Some(pos) = runs.iter().position(|&i| i == k) else {
                    continue;
                };
                for f in &self.frees[t][at] {
                    let later = runs[pos + 1..]
                        .iter()
                        .any(|&u| self.touches[u].contains(&f.value));
                    let next = self.p(t + 1, f.value).is_some_and(|p| x[p] > 0.5);
                    x[f.col] = if !later && !next { 1.0 } else { 0.0 };
                }
            }
        }
        for t in 0..self.n {
            let ops = &self.runnable[t];
            let mut a = 0.0;
            for (at, &k) in ops.iter().enumerate() {
                if at == 0 {
                    a = (0..self.values.len())
                        .filter_map(|v| self.p(t, v).map(|c| x[c] * self.weight(v)))
                        .sum();
                } else {
                    a -= self.freed(t, at - 1, x);
                }
                let runs = match self.r(t, k) {
                    Some(Term::One) => 1.0,
                    Some(Term::Col(c)) => x[c],
                    None => 0.0,
                };
                a += runs * self.makes[k].iter().map(|&v| self.weight(v)).sum::<f64>();
                x[self.a_at[t] + at] = a;
            }
        }
    }

    /// The rows a point breaks (by more than `tol`), for tests and the warm start.
    pub fn violated(&self, x: &[f64], tol: f64) -> Vec<usize> {
        let mut bad: Vec<usize> = (0..self.rows.len())
            .filter(|&r| {
                let row = &self.rows[r];
                let s: f64 = row.terms.iter().map(|&(c, a)| a * x[c]).sum();
                s < row.lo - tol || s > row.hi + tol
            })
            .collect();
        bad.extend(
            self.columns
                .iter()
                .zip(x)
                .enumerate()
                .filter(|(_, (c, &v))| v < c.lo - tol || v > c.hi + tol)
                .map(|(i, _)| usize::MAX - i),
        );
        bad
    }

    /// The objective at a point.
    pub fn objective(&self, x: &[f64]) -> f64 {
        self.columns.iter().zip(x).map(|(c, v)| c.cost * v).sum()
    }
}

/// One run's cost as a share of the step's, the objective's unit.
fn share(cost: f64, step: f64) -> f64 {
    if step > 0.0 {
        cost / step
    } else {
        0.0
    }
}

/// A storage that may be freed after an op of a stage, and its `F` column.
#[derive(Clone, Copy, Debug)]
struct Free {
    value: usize,
    col: usize,
}

/// A term of a row: a column or the constant 1.
#[derive(Clone, Copy, Debug)]
enum Term {
    One,
    Col(usize),
}

/// A linear expression being built: terms and a constant.
#[derive(Default)]
struct Lin {
    terms: Vec<(usize, f64)>,
    constant: f64,
}

impl Lin {
    fn add(&mut self, term: Option<Term>, coef: f64) {
        match term {
            Some(Term::Col(c)) => self.terms.push((c, coef)),
            Some(Term::One) => self.constant += coef,
            None => {}
        }
    }
}

/// The program admits what sgc plans: every stage-form plan of the other strategies is a
/// point of it, within the cap of its own peak, at the plan's own recompute.
#[cfg(test)]
mod tests {
    use super::Model;
    use crate::context::Context;
    use crate::options::{BudgetOf, PlanOptions, Strategy};
    use sgc_ir::{Graph, OpId};

    const GRAPHS: &[&str] = &[
        "graphs/tiny_mlp.json",
        "graphs/tiny_cnn.json",
        "graphs/mlp.json",
        "graphs/tiny_transformer.json",
        "benches/data/checkmate/vgg16_b256_train.json",
        "benches/data/checkmate/random_layered_n100.json",
    ];

    /// Plans of `graph` by the other strategies at budgets between its lower bound and its
    /// unplanned peak, as schedules.
    fn plans(g: &Graph) -> Vec<(String, Vec<(OpId, bool)>)> {
        let lb = g.lower_bound().bytes;
        let peak = g.memory_profile().peak;
        let mut out = Vec::new();
        for strategy in [
            Strategy::Sublinear,
            Strategy::Dtr,
            Strategy::Partition,
            Strategy::ChenSqrt,
            Strategy::None,
        ] {
            for q in [1.0, 0.8, 0.6, 0.4] {
                let budget = lb + ((peak - lb) as f64 * q) as u64;
                let options = PlanOptions {
                    strategy,
                    budget: (strategy != Strategy::ChenSqrt && strategy != Strategy::None)
                        .then_some(budget),
                    budget_of: BudgetOf::Peak,
                    arena: false,
                    ..PlanOptions::default()
                };
                if let Ok(plan) = crate::plan(g, &options, &Default::default()) {
                    let steps = plan.steps.iter().map(|s| (s.op, s.recompute)).collect();
                    out.push((format!("{strategy} at {q}"), steps));
                }
            }
        }
        out
    }

    #[test]
    fn every_stage_form_plan_is_a_point_within_its_own_peak() {
        for rel in GRAPHS {
            let g = crate::testing::load(rel);
            let ctx = Context::new(&g);
            let mut points = 0;
            for (what, steps) in plans(&g) {
                let profile =
                    sgc_ir::simulate(&g, &steps.iter().map(|s| s.0).collect::<Vec<_>>()).unwrap();
                let cap = profile.peak - profile.persistent_bytes;
                let m = Model::build(&ctx, cap, usize::MAX).unwrap();
                let Some(x) = m.point_of(&steps) else {
                    continue;
                };
                let sorted = m.schedule_of(&x) == steps;
                if !sorted {
                    // Recomputations put in traced order: a point when still within the cap.
                    continue;
                }
                points += 1;
                let bad = m.violated(&x, 1e-6);
                assert!(
                    bad.is_empty(),
                    "{rel}, {what}: the point breaks {} rows",
                    bad.len()
                );
                let summary = crate::plan::summarize(&g, &steps, &profile, 0, None);
                assert!(
                    (m.objective(&x) - summary.recompute_share).abs() < 1e-9,
                    "{rel}, {what}: objective {} against the plan's recompute {}",
                    m.objective(&x),
                    summary.recompute_share
                );
                // Without the ops dearer than the whole plan, it is still a point, at the
                // same cost.
                let dearest = m.objective(&x) * (1.0 + 1e-9);
                let below = Model::build_below(&ctx, cap, usize::MAX, dearest).unwrap();
                let y = below.point_of(&steps).unwrap();
                assert!(below.violated(&y, 1e-6).is_empty(), "{rel}, {what}: below");
                assert!((below.objective(&y) - m.objective(&x)).abs() < 1e-12);
                assert!(below.columns.len() <= m.columns.len());
                // One byte less is too little for this very schedule.
                let tight = Model::build(&ctx, cap - 1, usize::MAX).unwrap();
                let x = tight.point_of(&steps).unwrap();
                assert!(!tight.violated(&x, 1e-6).is_empty(), "{rel}, {what}");
            }
            assert!(points > 0, "{rel}: no plan was in stage form");
        }
    }
}
