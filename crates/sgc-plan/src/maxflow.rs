//! Maximum flow and minimum cut (Dinic's algorithm) on a graph whose edge capacities are
//! linear in two weights, so that one network is built once and solved at many weights.
//!
//! An edge's capacity is `a * bytes + b * units` for the weights `(a, b)` of a solve, or
//! unbounded ([`Cap::Inf`]). Capacities are `u128`: bytes up to 2^50 times a weight up to
//! 2^60 stays far below overflow, so cuts at different weights compare exactly.
//!
//! Dinic's algorithm: a breadth-first search labels every node with its distance from the
//! source in the residual graph; depth-first searches then push blocking flow along
//! shortest paths only (each node remembers which edge it tried last); repeat until the
//! sink is unreachable. The minimum cut's source side is what the source still reaches:
//! the smallest source side among all minimum cuts, so the answer does not depend on the
//! order edges were added in beyond the flow itself, which is deterministic.

/// An edge's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cap {
    /// `a * bytes + b * units` at the weights of a solve.
    Linear { bytes: u64, units: u64 },
    /// Never cut.
    Inf,
}

/// A flow network with capacities linear in two weights.
pub(crate) struct Network {
    n: usize,
    /// Per edge: head, capacity rule (reverse edges have zero capacity).
    to: Vec<u32>,
    cap: Vec<Option<Cap>>,
    /// Per node: its edges (indices; edge `e ^ 1` is the reverse of `e`).
    adj: Vec<Vec<u32>>,
}

/// "Unbounded": larger than any finite cut (every finite capacity is below 2^118 and there
/// are fewer than 2^32 edges).
const INF: u128 = 1 << 126;

impl Network {
    pub fn new(n: usize) -> Self {
        Network {
            n,
            to: Vec::new(),
            cap: Vec::new(),
            adj: vec![Vec::new(); n],
        }
    }

    /// A copy whose linear capacities are changed by `f(tail, bytes, units)`.
    pub fn map_caps(&self, f: impl Fn(usize, u64, u64) -> (u64, u64)) -> Network {
        let cap = self
            .cap
            .iter()
            .enumerate()
            .map(|(e, c)| match c {
                Some(Cap::Linear { bytes, units }) => {
                    let (bytes, units) = f(self.to[e ^ 1] as usize, *bytes, *units);
                    Some(Cap::Linear { bytes, units })
                }
                other => *other,
            })
            .collect();
        Network {
            n: self.n,
            to: self.to.clone(),
            cap,
            adj: self.adj.clone(),
        }
    }

    /// Adds the edge `u -> v`.
    pub fn edge(&mut self, u: usize, v: usize, cap: Cap) {
        let e = self.to.len() as u32;
        self.to.push(v as u32);
        self.cap.push(Some(cap));
        self.adj[u].push(e);
        self.to.push(u as u32);
        self.cap.push(None);
        self.adj[v].push(e + 1);
    }

    /// The minimum cut from `s` to `t` at weights `(a, b)`: its value and, per node,
    /// whether it lies on the source side.
    pub fn min_cut(&self, s: usize, t: usize, a: u128, b: u128) -> (u128, Vec<bool>) {
        let (flow, res) = self.max_flow(s, t, a, b);
        let mut level = vec![u32::MAX; self.n];
        self.levels(&res, s, t, &mut level);
        (flow, level.iter().map(|&l| l != u32::MAX).collect())
    }

    /// Every minimum cut at weights `(a, b)`, as a chain: the smallest source side, and
    /// groups of nodes that, added one after another, give ever larger source sides that
    /// are all minimum cuts, up to the largest. (The minimum cuts are the sets closed under
    /// the residual graph's edges between the two extremes; a node's strongly connected
    /// component moves as one, and Tarjan's algorithm emits a component only after every
    /// component it reaches, so each prefix of its order is closed.)
    pub fn min_cut_chain(
        &self,
        s: usize,
        t: usize,
        a: u128,
        b: u128,
    ) -> (Vec<bool>, Vec<Vec<usize>>) {
        let (_, res) = self.max_flow(s, t, a, b);
        let mut level = vec![u32::MAX; self.n];
        self.levels(&res, s, t, &mut level);
        let source: Vec<bool> = level.iter().map(|&l| l != u32::MAX).collect();
        // Nodes that still reach the sink are on its side in every minimum cut.
        let mut to_sink = vec![false; self.n];
        to_sink[t] = true;
        let mut stack = vec![t];
        while let Some(v) = stack.pop() {
            for &e in &self.adj[v] {
                let u = self.to[e as usize] as usize;
                if res[(e ^ 1) as usize] > 0 && !to_sink[u] {
                    to_sink[u] = true;
                    stack.push(u);
                }
            }
        }
        let middle: Vec<bool> = (0..self.n).map(|v| !source[v] && !to_sink[v]).collect();
        (source, self.components(&res, &middle))
    }

    /// Strongly connected components of the residual graph on `middle`, in Tarjan's order
    /// (iterative: graphs of a million nodes would overflow the stack).
    fn components(&self, res: &[u128], middle: &[bool]) -> Vec<Vec<usize>> {
        const NONE: u32 = u32::MAX;
        let mut index = vec![NONE; self.n];
        let mut low = vec![0u32; self.n];
        let mut on_stack = vec![false; self.n];
        let mut stack: Vec<usize> = Vec::new();
        let mut out = Vec::new();
        let mut counter = 0u32;
        for root in 0..self.n {
            if !middle[root] || index[root] != NONE {
                continue;
            }
            // (node, next edge position)
            let mut call: Vec<(usize, usize)> = vec![(root, 0)];
            index[root] = counter;
            low[root] = counter;
            counter += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (v, ref mut pos)) = call.last_mut() {
                if let Some(&e) = self.adj[v].get(*pos) {
                    *pos += 1;
                    let w = self.to[e as usize] as usize;
                    if res[e as usize] == 0 || !middle[w] {
                        continue;
                    }
                    if index[w] == NONE {
                        index[w] = counter;
                        low[w] = counter;
                        counter += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        call.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                call.pop();
                if let Some(&(parent, _)) = call.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
        out
    }

    /// Dinic's maximum flow: its value and the residual capacities.
    fn max_flow(&self, s: usize, t: usize, a: u128, b: u128) -> (u128, Vec<u128>) {
        let mut res: Vec<u128> = self
            .cap
            .iter()
            .map(|c| match c {
                None => 0,
                Some(Cap::Inf) => INF,
                Some(Cap::Linear { bytes, units }) => {
                    (a * u128::from(*bytes) + b * u128::from(*units)).min(INF)
                }
            })
            .collect();
        let mut flow: u128 = 0;
        let mut level = vec![u32::MAX; self.n];
        let mut next = vec![0usize; self.n];
        while self.levels(&res, s, t, &mut level) {
            next.iter_mut().for_each(|x| *x = 0);
            loop {
                let f = self.push(&mut res, &level, &mut next, s, t);
                if f == 0 {
                    break;
                }
                flow = flow.saturating_add(f);
            }
        }
        (flow, res)
    }

    /// Breadth-first distances from `s` over edges with residual capacity; whether `t` is
    /// reached.
    fn levels(&self, res: &[u128], s: usize, t: usize, level: &mut [u32]) -> bool {
        level.iter_mut().for_each(|l| *l = u32::MAX);
        let mut queue = std::collections::VecDeque::new();
        level[s] = 0;
        queue.push_back(s);
        while let Some(u) = queue.pop_front() {
            for &e in &self.adj[u] {
                let v = self.to[e as usize] as usize;
                if res[e as usize] > 0 && level[v] == u32::MAX {
                    level[v] = level[u] + 1;
                    queue.push_back(v);
                }
            }
        }
        level[t] != u32::MAX
    }

    /// One augmenting path along increasing levels (iterative depth-first search with
    /// per-node edge pointers); the flow pushed, 0 when none is left in this phase.
    fn push(
        &self,
        res: &mut [u128],
        level: &[u32],
        next: &mut [usize],
        s: usize,
        t: usize,
    ) -> u128 {
        let mut path: Vec<u32> = Vec::new();
        let mut u = s;
        loop {
            if u == t {
                let f = path.iter().map(|&e| res[e as usize]).min().unwrap_or(0);
                for &e in &path {
                    res[e as usize] -= f;
                    res[(e ^ 1) as usize] += f;
                }
                return f;
            }
            let mut advanced = false;
            while next[u] < self.adj[u].len() {
                let e = self.adj[u][next[u]];
                let v = self.to[e as usize] as usize;
                if res[e as usize] > 0 && level[v] == level[u] + 1 {
                    path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                next[u] += 1;
            }
            if !advanced {
                // Dead end: retreat and skip the edge that led here.
                let Some(e) = path.pop() else {
                    return 0;
                };
                u = self.to[(e ^ 1) as usize] as usize;
                next[u] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lin(bytes: u64) -> Cap {
        Cap::Linear { bytes, units: 0 }
    }

    #[test]
    fn classic_network_has_the_known_min_cut() {
        // CLRS figure 26.1: max flow 23.
        let mut g = Network::new(6);
        for (u, v, c) in [
            (0, 1, 16),
            (0, 2, 13),
            (1, 3, 12),
            (2, 1, 4),
            (2, 4, 14),
            (3, 2, 9),
            (3, 5, 20),
            (4, 3, 7),
            (4, 5, 4),
        ] {
            g.edge(u, v, lin(c));
        }
        let (f, side) = g.min_cut(0, 5, 1, 0);
        assert_eq!(f, 23);
        assert_eq!(side, vec![true, true, true, false, true, false]);
    }

    #[test]
    fn weights_scale_both_terms_and_inf_is_never_cut() {
        let mut g = Network::new(4);
        g.edge(
            0,
            1,
            Cap::Linear {
                bytes: 10,
                units: 0,
            },
        );
        g.edge(0, 2, Cap::Linear { bytes: 0, units: 3 });
        g.edge(1, 3, Cap::Inf);
        g.edge(2, 3, Cap::Inf);
        assert_eq!(g.min_cut(0, 3, 2, 5).0, 20 + 15);
        // A cut made only of unbounded edges is "infinite".
        let mut h = Network::new(2);
        h.edge(0, 1, Cap::Inf);
        assert!(h.min_cut(0, 1, 1, 1).0 >= INF);
    }

    #[test]
    fn the_chain_walks_every_minimum_cut_from_smallest_to_largest() {
        // 0 -> 1 -> 2 -> 3 -> 4 (sink), capacity 5 each: every one of the four edges is a
        // minimum cut, so source sides {0}, {0,1}, {0,1,2}, {0,1,2,3}.
        let mut g = Network::new(5);
        for v in 0..4 {
            g.edge(v, v + 1, lin(5));
        }
        let (source, groups) = g.min_cut_chain(0, 4, 1, 0);
        assert_eq!(source, vec![true, false, false, false, false]);
        assert_eq!(groups, vec![vec![1], vec![2], vec![3]]);
        // A cycle between 1 and 2 (unbounded both ways) moves as one group.
        g.edge(1, 2, Cap::Inf);
        g.edge(2, 1, Cap::Inf);
        let (_, groups) = g.min_cut_chain(0, 4, 1, 0);
        let mut first = groups[0].clone();
        first.sort();
        assert_eq!((first, groups.len()), (vec![1, 2], 2));
    }
}
