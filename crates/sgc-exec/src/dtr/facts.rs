//! What the engine needs to know about a graph, fixed before the first step: storages,
//! their sizes and producers, where each one's last use falls in the traced order, which
//! may be evicted and recomputed, which ops write a storage in place, and op costs.

use sgc_ir::{DeviceProfile, Graph, OpId, TensorId, TensorKind};

/// Per-graph facts (indexes: tensors by `TensorId::index`, meaningful for storage roots;
/// ops by `OpId::index`).
pub(crate) struct Facts {
    pub num_ops: usize,
    /// Each tensor's storage root.
    pub root: Vec<TensorId>,
    /// Storage bytes of each root.
    pub size: Vec<u64>,
    /// Params, state and consts: allocated once, never freed or evicted.
    pub persistent: Vec<bool>,
    /// The storage of a graph output: kept to the end of the step, never evicted.
    pub output: Vec<bool>,
    /// The op that makes each activation root.
    pub producer: Vec<Option<OpId>>,
    /// May be evicted and made again by running its producer: an activation root of a
    /// recomputable op, not a graph output's storage, not written in place by another op.
    pub evictable: Vec<bool>,
    /// The last op (traced order) that reads or writes each non-persistent root;
    /// `usize::MAX` for graph outputs.
    pub last_use: Vec<usize>,
    /// Per op: the roots whose last use it is.
    pub deaths: Vec<Vec<TensorId>>,
    /// Per op: its distinct non-persistent input roots.
    pub in_roots: Vec<Vec<TensorId>>,
    /// Per op: the roots it makes (its outputs that own their storage, non-persistent).
    pub out_roots: Vec<Vec<TensorId>>,
    /// Per root: the evictable roots whose producer reads it.
    pub children: Vec<Vec<TensorId>>,
    /// Per op: moves no data (every output a view of its first input's storage).
    pub no_op: Vec<bool>,
    /// Per op: storages it writes in place (an `sgd_update` or `copy_` target, or a view
    /// output of another storage written by a kernel).
    pub mutates: Vec<Vec<TensorId>>,
    /// Per root written in place: the ops (not no-ops) that read it, in order.
    pub readers: Vec<Vec<OpId>>,
    /// Per op: its cost (`Graph::op_cost_with` the profile).
    pub cost: Vec<f64>,
    /// Persistent roots, in graph order.
    pub persistent_roots: Vec<TensorId>,
    /// Input roots, in graph order.
    pub input_roots: Vec<TensorId>,
}

impl Facts {
    /// The facts of `graph`; `no_op[op]` says which ops the target skips, `writes_first[op]`
    /// which write their first input in place.
    pub fn new(
        graph: &Graph,
        no_op: Vec<bool>,
        writes_first: &[bool],
        profile: Option<&DeviceProfile>,
    ) -> Facts {
        let nt = graph.num_tensors();
        let n = graph.num_ops();
        let root: Vec<TensorId> = graph.tensor_ids().map(|t| graph.storage_root(t)).collect();
        let is_root = |t: TensorId| root[t.index()] == t;
        let size = graph.tensor_ids().map(|t| graph.tensor(t).size).collect();
        let kind = |t: TensorId| graph.tensor(t).kind;
        let persistent: Vec<bool> = graph
            .tensor_ids()
            .map(|t| kind(t).is_persistent())
            .collect();
        let mut output = vec![false; nt];
        for &t in graph.outputs() {
            output[root[t.index()].index()] = true;
        }
        let producer: Vec<Option<OpId>> = graph
            .tensor_ids()
            .map(|t| graph.producer(t).filter(|_| is_root(t)))
            .collect();
        let mut in_roots = Vec::with_capacity(n);
        let mut out_roots = Vec::with_capacity(n);
        let mut mutates = vec![Vec::new(); n];
        let mut last_use = vec![0usize; nt];
        for op in graph.op_ids() {
            let o = graph.op(op);
            let i = op.index();
            let mut ins: Vec<TensorId> = o.inputs.iter().map(|&t| root[t.index()]).collect();
            ins.sort();
            ins.dedup();
            let mut all: Vec<TensorId> = ins.clone();
            all.extend(o.outputs.iter().map(|&t| root[t.index()]));
            all.sort();
            all.dedup();
            for &r in &all {
                last_use[r.index()] = i;
            }
            if writes_first.get(i).copied().unwrap_or(false) {
                if let Some(&t) = o.inputs.first() {
                    mutates[i].push(root[t.index()]);
                }
            }
            if !no_op[i] {
                for &t in o.outputs.iter().filter(|&&t| !is_root(t)) {
                    mutates[i].push(root[t.index()]);
                }
            }
            mutates[i].sort();
            mutates[i].dedup();
            ins.retain(|r| !persistent[r.index()]);
            in_roots.push(if no_op[i] { Vec::new() } else { ins });
            let outs: Vec<TensorId> = o
                .outputs
                .iter()
                .copied()
                .filter(|&t| is_root(t) && !persistent[t.index()])
                .collect();
            out_roots.push(outs);
        }
        let mut written = vec![false; nt];
        for m in mutates.iter().flatten() {
            written[m.index()] = true;
        }
        let mut readers = vec![Vec::new(); nt];
        for op in graph.op_ids().filter(|o| !no_op[o.index()]) {
            for &t in &graph.op(op).inputs {
                let r = root[t.index()];
                if written[r.index()] && readers[r.index()].last() != Some(&op) {
                    readers[r.index()].push(op);
                }
            }
        }
        let mut deaths = vec![Vec::new(); n];
        let mut persistent_roots = Vec::new();
        let mut input_roots = Vec::new();
        for t in graph.tensor_ids().filter(|&t| is_root(t)) {
            if persistent[t.index()] {
                persistent_roots.push(t);
                continue;
            }
            if kind(t) == TensorKind::Input {
                input_roots.push(t);
            }
            if output[t.index()] {
                last_use[t.index()] = usize::MAX;
            } else if n > 0 {
                deaths[last_use[t.index()].min(n - 1)].push(t);
            }
        }
        let evictable: Vec<bool> = graph
            .tensor_ids()
            .map(|t| {
                let p: Option<OpId> = producer_of(&producer, t);
                is_root(t)
                    && kind(t) == TensorKind::Activation
                    && !output[t.index()]
                    && !written[t.index()]
                    && p.is_some_and(|p| graph.op(p).recomputable && !no_op[p.index()])
            })
            .collect();
        let mut children = vec![Vec::new(); nt];
        for t in graph.tensor_ids().filter(|t| evictable[t.index()]) {
            if let Some(p) = producer_of(&producer, t) {
                for &x in &in_roots[p.index()] {
                    children[x.index()].push(t);
                }
            }
        }
        let cost = graph
            .op_ids()
            .map(|o| graph.op_cost_with(o, profile).0)
            .collect();
        Facts {
            num_ops: n,
            root,
            size,
            persistent,
            output,
            producer,
            evictable,
            last_use,
            deaths,
            in_roots,
            out_roots,
            children,
            no_op,
            mutates,
            readers,
            cost,
            persistent_roots,
            input_roots,
        }
    }

    /// The graph-level rule for ops that move no data: at least one output, every output a
    /// view of the first input's storage (the executor's view ops).
    pub fn view_ops(graph: &Graph) -> Vec<bool> {
        graph
            .op_ids()
            .map(|op| {
                let o = graph.op(op);
                let base = o.inputs.first().map(|&t| graph.storage_root(t));
                !o.outputs.is_empty()
                    && o.outputs.iter().all(|&t| {
                        graph.tensor(t).alias_of.is_some() && Some(graph.storage_root(t)) == base
                    })
            })
            .collect()
    }

    /// The cost of one step: every op that runs a kernel, once.
    pub fn step_cost(&self) -> f64 {
        (0..self.num_ops)
            .filter(|&i| !self.no_op[i])
            .map(|i| self.cost[i])
            .sum()
    }
}

fn producer_of(producer: &[Option<OpId>], t: TensorId) -> Option<OpId> {
    producer[t.index()]
}
