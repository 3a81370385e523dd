//! The plan's arena: every non-persistent storage lifetime of a schedule gets an offset in
//! one device arena, chosen ahead of time, so the arena size is the number a device needs
//! (plus the persistent bytes).
//!
//! # Method
//! 1. Each [`Lifetime`] `{root, first_step, last_step, bytes}` (inclusive steps) becomes an
//!    [`alloc::Buffer`] over the half-open interval `[first_step, last_step + 1)`.
//! 2. In-place pairs come from the ops' `inplace` fields ([`in_place_pairs`]): at step `s`
//!    an op may write output `o` into input `i`'s storage when the rule of
//!    [`Graph::in_place_allowed`] holds and the input's lifetime ends at `s` while the output's
//!    starts at `s`. Such a pair may share one address; the allocator is free not to use it.
//! 3. [`alloc::allocate`] places the buffers (its portfolio: greedy by size, best-fit sweep,
//!    pushdown, bounded exact search) with every offset a multiple of `align` and padded
//!    sizes, twice: once as they are, and once with every in-place chain (lifetimes joined
//!    by pairs) merged into one buffer over the union of its steps, so that every algorithm,
//!    the exact search included, exploits the sharing. Order (each step only while the
//!    best arena is above the aligned live peak): the merged instance with heuristics only;
//!    the plain instance with the full portfolio (search included); the merged instance
//!    with the search. The merged instance's own bound lies below the live peak, so its
//!    search would spend its whole budget chasing it: it runs last. The smaller arena wins
//!    (the earlier on a tie); the result is deterministic.
//!
//! # The bound and fragmentation
//! [`ArenaLayout::lower_bound`] is the peak of live bytes of the schedule, every size
//! rounded up to `align`: no placement without in-place sharing can be smaller. Reports
//! give fragmentation relative to it: `arena / lower_bound - 1` (so 1.01x is 1%). In-place
//! sharing can take an arena below the bound, which then reads as a negative percentage.

use crate::alloc::{self, AllocOptions, Buffer, Effort, InPlace};
use crate::error::PlanError;
use sgc_ir::{Graph, OpId, TensorId};
pub use sgc_plan_format::plan::ArenaLayout;
use sgc_plan_format::plan::Lifetime;
use std::collections::HashMap;

/// The buffers of `lifetimes`, in the same order (`upper = last_step + 1`).
pub fn buffers(lifetimes: &[Lifetime]) -> Vec<Buffer> {
    lifetimes
        .iter()
        .map(|l| Buffer {
            lower: l.first_step as u64,
            upper: l.last_step as u64 + 1,
            size: l.bytes,
        })
        .collect()
}

/// The in-place pairs of a schedule (`ops[s]` runs at step `s`) over its `lifetimes`:
/// `(output lifetime, input lifetime)` indices. Each output and each input is in at most
/// one pair; an op's declared pairs are taken in their order.
pub fn in_place_pairs(graph: &Graph, ops: &[OpId], lifetimes: &[Lifetime]) -> Vec<InPlace> {
    let mut starting: HashMap<(TensorId, usize), usize> = HashMap::new();
    let mut ending: HashMap<(TensorId, usize), usize> = HashMap::new();
    for (k, l) in lifetimes.iter().enumerate() {
        starting.insert((l.root, l.first_step), k);
        ending.insert((l.root, l.last_step), k);
    }
    // A lifetime can be the output of one pair and the input of the next (a chain).
    let (mut written, mut given) = (vec![false; lifetimes.len()], vec![false; lifetimes.len()]);
    let mut pairs = Vec::new();
    for (s, &op) in ops.iter().enumerate() {
        for &(oi, ii) in &graph.op(op).inplace {
            let o = graph.op(op);
            let (Some(&out), Some(&inp)) = (o.outputs.get(oi), o.inputs.get(ii)) else {
                continue;
            };
            let (Some(&a), Some(&b)) = (starting.get(&(out, s)), ending.get(&(inp, s))) else {
                continue;
            };
            if written[a] || given[b] || !graph.in_place_allowed(op, out, inp) {
                continue;
            }
            written[a] = true;
            given[b] = true;
            pairs.push(InPlace {
                output: a,
                input: b,
            });
        }
    }
    pairs
}

/// Places `lifetimes` (of the schedule `ops`) in one arena: see the [module docs](self).
pub fn assign(
    graph: &Graph,
    ops: &[OpId],
    lifetimes: &[Lifetime],
    align: u64,
    effort: Effort,
) -> Result<ArenaLayout, PlanError> {
    let bufs = buffers(lifetimes);
    let pairs = in_place_pairs(graph, ops, lifetimes);
    let err = |e: alloc::AllocError| PlanError::Arena(e.to_string());
    let options = AllocOptions {
        align,
        effort,
        in_place: Vec::new(),
    };
    let lower_bound = alloc::lower_bound(&bufs, align);
    let chains = Chains::new(lifetimes.len(), &pairs);
    let merged_bufs = chains.buffers(&bufs);
    let used: Vec<(usize, usize)> = pairs.iter().map(|p| (p.output, p.input)).collect();
    let merged = |effort: Effort| -> Result<Candidate, PlanError> {
        let options = AllocOptions {
            effort,
            ..options.clone()
        };
        let m = alloc::allocate_until(&merged_bufs, &options, lower_bound).map_err(err)?;
        Ok((
            m.arena,
            chains.expand(&m.offsets),
            m.algorithm,
            used.clone(),
        ))
    };
    // The merged instance's own bound is below the plain one, so its search would chase a
    // bound out of reach: heuristics first, the search only when everything else misses.
    let mut best: Option<Candidate> = None;
    if !pairs.is_empty() {
        best = Some(merged(Effort::FAST)?);
    }
    let reached = |b: &Option<Candidate>| b.as_ref().is_some_and(|b| b.0 <= lower_bound);
    if !reached(&best) {
        let plain = alloc::allocate(&bufs, &options).map_err(err)?;
        if best.as_ref().is_none_or(|b| plain.arena <= b.0) {
            best = Some((plain.arena, plain.offsets, plain.algorithm, Vec::new()));
        }
    }
    if !pairs.is_empty() && !reached(&best) {
        let searched = merged(effort)?;
        if best.as_ref().is_none_or(|b| searched.0 < b.0) {
            best = Some(searched);
        }
    }
    let best = best.expect("one of the two runs placed the buffers");
    let (size, offsets, algorithm, in_place) = best;
    Ok(ArenaLayout {
        align,
        size,
        lower_bound,
        offsets,
        algorithm,
        in_place,
    })
}

/// The smallest arena any placement of the schedule could have, placing nothing: the
/// aligned live peak of its lifetimes with every in-place chain merged into one buffer
/// (the merged instance [`assign`] places). O(n log n), where [`assign`] runs a portfolio.
pub(crate) fn floor(graph: &Graph, ops: &[OpId], lifetimes: &[Lifetime], align: u64) -> u64 {
    let pairs = in_place_pairs(graph, ops, lifetimes);
    let chains = Chains::new(lifetimes.len(), &pairs);
    alloc::lower_bound(&chains.buffers(&buffers(lifetimes)), align)
}

/// An arena, its offsets, the algorithm and the in-place pairs it uses.
type Candidate = (u64, Vec<u64>, String, Vec<(usize, usize)>);

/// In-place chains: lifetimes joined by pairs (an output that is the input of the next
/// pair) become one buffer over the union of their steps. Pair members have the same size
/// and meet at one step, so a placement of the chains is a placement of the lifetimes in
/// which every pair shares its address, and every algorithm (the exact search included)
/// sees the saving.
struct Chains {
    /// Chain of each lifetime.
    of: Vec<usize>,
    count: usize,
}

impl Chains {
    fn new(n: usize, pairs: &[InPlace]) -> Chains {
        let mut next: Vec<Option<usize>> = vec![None; n];
        let mut has_prev = vec![false; n];
        for p in pairs {
            next[p.input] = Some(p.output);
            has_prev[p.output] = true;
        }
        let mut of = vec![usize::MAX; n];
        let mut count = 0;
        for start in (0..n).filter(|&k| !has_prev[k]) {
            let mut k = Some(start);
            while let Some(i) = k {
                of[i] = count;
                k = next[i];
            }
            count += 1;
        }
        Chains { of, count }
    }

    fn buffers(&self, bufs: &[Buffer]) -> Vec<Buffer> {
        let mut out: Vec<Option<Buffer>> = vec![None; self.count];
        for (b, &c) in bufs.iter().zip(&self.of) {
            let m = out[c].get_or_insert(*b);
            m.lower = m.lower.min(b.lower);
            m.upper = m.upper.max(b.upper);
            m.size = m.size.max(b.size);
        }
        out.into_iter().flatten().collect()
    }

    fn expand(&self, chain_offsets: &[u64]) -> Vec<u64> {
        self.of.iter().map(|&c| chain_offsets[c]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use sgc_ir::ops::OpKind;
    use sgc_ir::{DType, GraphDef, OpDef, TensorDef, TensorKind};

    /// Three relus in a chain `x -> a -> b -> c`, each declared in place (output 0 over
    /// input 0); the last also reads `h_reads`, and the graph's outputs are `outputs`.
    fn chain(h_reads: &[&str], outputs: &[&str]) -> Graph {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let tensor = |name: &str| TensorDef::new(name, DType::F32, vec![64]);
        let x = TensorDef {
            kind: TensorKind::Input,
            ..tensor("x")
        };
        let op = |name: &str, inputs: &[&str], output: &str| OpDef {
            inplace: vec![(0, 0)],
            ..OpDef::new(name, OpKind::Relu.name(), names(inputs), names(&[output]))
        };
        let h_inputs: Vec<&str> = ["b"].into_iter().chain(h_reads.iter().copied()).collect();
        let def = GraphDef {
            tensors: vec![x, tensor("a"), tensor("b"), tensor("c")],
            ops: vec![
                op("f", &["x"], "a"),
                op("g", &["a"], "b"),
                op("h", &h_inputs, "c"),
            ],
            outputs: names(outputs),
            ..GraphDef::default()
        };
        Graph::from_def(def).unwrap()
    }

    fn lifetimes(g: &Graph) -> (Vec<OpId>, Vec<Lifetime>) {
        let ops: Vec<OpId> = g.op_ids().collect();
        let p = sgc_ir::simulate(g, &ops).unwrap();
        let l = p.instances.iter().map(Lifetime::from).collect();
        (ops, l)
    }

    #[test]
    fn declared_pairs_whose_input_dies_share_an_address() {
        let g = chain(&[], &["c"]);
        let (ops, l) = lifetimes(&g);
        let pairs = in_place_pairs(&g, &ops, &l);
        assert_eq!(pairs.len(), 3, "every op runs in place");
        let a = assign(&g, &ops, &l, 256, Effort::DEFAULT).unwrap();
        assert_eq!(a.lower_bound, 512);
        assert_eq!(a.size, 256, "the chain runs in one buffer");
        assert_eq!(a.in_place.len(), 3);
        assert!(a.offsets.iter().all(|o| o % 256 == 0));
    }

    #[test]
    fn a_graph_output_or_a_live_input_is_never_overwritten() {
        // `a` is read again by `h`: `g` may not overwrite it; `c` is kept.
        let g = chain(&["a"], &["c"]);
        let (ops, l) = lifetimes(&g);
        let inputs = |g: &Graph, l: &[Lifetime], ops: &[OpId]| -> Vec<String> {
            in_place_pairs(g, ops, l)
                .iter()
                .map(|p| g.tensor(l[p.input].root).name.clone())
                .collect()
        };
        assert_eq!(inputs(&g, &l, &ops), ["x", "b"], "`a` is read after `g`");
        let g = chain(&[], &["c", "b"]);
        let (ops, l) = lifetimes(&g);
        assert_eq!(inputs(&g, &l, &ops), ["x", "a"], "`b` is a graph output");
    }
}
