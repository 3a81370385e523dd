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
        let n = graph.num_ops();
        let root: Vec<TensorId> = graph.tensor_ids().map(|t| graph.storage_root(t)).collect();
        let is_root = |t: TensorId| root[t.index()] == t;
        let persistent: Vec<bool> = graph
            .tensor_ids()
            .map(|t| graph.tensor(t).kind.is_persistent())
            .collect();
        let mut output = vec![false; graph.num_tensors()];
        for &t in graph.outputs() {
            output[root[t.index()].index()] = true;
        }
        let producer: Vec<Option<OpId>> = graph
            .tensor_ids()
            .map(|t| graph.producer(t).filter(|_| is_root(t)))
            .collect();
        let mut ops = OpRoots::new(graph, &root, &persistent, &no_op, writes_first);
        let (written, readers) = readers(graph, &root, &no_op, &ops.mutates);
        let lists = StorageLists::new(graph, &root, &persistent, &output, &mut ops.last_use);
        let evictable: Vec<bool> = graph
            .tensor_ids()
            .map(|t| {
                is_root(t)
                    && graph.tensor(t).kind == TensorKind::Activation
                    && !output[t.index()]
                    && !written[t.index()]
                    && producer[t.index()]
                        .is_some_and(|p| graph.op(p).recomputable && !no_op[p.index()])
            })
            .collect();
        let mut children = vec![Vec::new(); graph.num_tensors()];
        for t in graph.tensor_ids().filter(|t| evictable[t.index()]) {
            if let Some(p) = producer[t.index()] {
                for &x in &ops.in_roots[p.index()] {
                    children[x.index()].push(t);
                }
            }
        }
        Facts {
            num_ops: n,
            size: graph.tensor_ids().map(|t| graph.tensor(t).size).collect(),
            root,
            persistent,
            output,
            producer,
            evictable,
            last_use: ops.last_use,
            deaths: lists.deaths,
            in_roots: ops.in_roots,
            out_roots: ops.out_roots,
            children,
            no_op,
            mutates: ops.mutates,
            readers,
            cost: graph
                .op_ids()
                .map(|o| graph.op_cost_with(o, profile).0)
                .collect(),
            persistent_roots: lists.persistent_roots,
            input_roots: lists.input_roots,
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

/// The storage roots each op touches, and where each root is last used.
struct OpRoots {
    in_roots: Vec<Vec<TensorId>>,
    out_roots: Vec<Vec<TensorId>>,
    mutates: Vec<Vec<TensorId>>,
    last_use: Vec<usize>,
}

impl OpRoots {
    fn new(
        graph: &Graph,
        root: &[TensorId],
        persistent: &[bool],
        no_op: &[bool],
        writes_first: &[bool],
    ) -> OpRoots {
        let n = graph.num_ops();
        let is_root = |t: TensorId| root[t.index()] == t;
        let mut r = OpRoots {
            in_roots: Vec::with_capacity(n),
            out_roots: Vec::with_capacity(n),
            mutates: vec![Vec::new(); n],
            last_use: vec![0usize; graph.num_tensors()],
        };
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
            for &x in &all {
                r.last_use[x.index()] = i;
            }
            let mutates = &mut r.mutates[i];
            if writes_first.get(i).copied().unwrap_or(false) {
                if let Some(&t) = o.inputs.first() {
                    mutates.push(root[t.index()]);
                }
            }
            if !no_op[i] {
                for &t in o.outputs.iter().filter(|&&t| !is_root(t)) {
                    mutates.push(root[t.index()]);
                }
            }
            mutates.sort();
            mutates.dedup();
            ins.retain(|x| !persistent[x.index()]);
            r.in_roots.push(if no_op[i] { Vec::new() } else { ins });
            let outs: Vec<TensorId> = o
                .outputs
                .iter()
                .copied()
                .filter(|&t| is_root(t) && !persistent[t.index()])
                .collect();
            r.out_roots.push(outs);
        }
        r
    }
}

/// Which roots some op writes in place, and per such root the ops (not no-ops) that read
/// it, in order.
fn readers(
    graph: &Graph,
    root: &[TensorId],
    no_op: &[bool],
    mutates: &[Vec<TensorId>],
) -> (Vec<bool>, Vec<Vec<OpId>>) {
    let nt = graph.num_tensors();
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
    (written, readers)
}

/// The roots by role: persistent and input roots in graph order, and per op the roots
/// whose last use it is.
struct StorageLists {
    deaths: Vec<Vec<TensorId>>,
    persistent_roots: Vec<TensorId>,
    input_roots: Vec<TensorId>,
}

impl StorageLists {
    /// Also sets the last use of graph outputs' roots to `usize::MAX`.
    fn new(
        graph: &Graph,
        root: &[TensorId],
        persistent: &[bool],
        output: &[bool],
        last_use: &mut [usize],
    ) -> StorageLists {
        let n = graph.num_ops();
        let mut l = StorageLists {
            deaths: vec![Vec::new(); n],
            persistent_roots: Vec::new(),
            input_roots: Vec::new(),
        };
        for t in graph.tensor_ids().filter(|&t| root[t.index()] == t) {
            if persistent[t.index()] {
                l.persistent_roots.push(t);
                continue;
            }
            if graph.tensor(t).kind == TensorKind::Input {
                l.input_roots.push(t);
            }
            if output[t.index()] {
                last_use[t.index()] = usize::MAX;
            } else if n > 0 {
                l.deaths[last_use[t.index()].min(n - 1)].push(t);
            }
        }
        l
    }
}
