//! Which resident storage to evict: DTR's score over the eviction candidates.
//!
//! ```text
//! score(t) = cost of t's evicted neighbourhood / (bytes(t) * staleness(t))
//! ```
//!
//! The neighbourhood is t's producer plus every evicted storage that evicting t would make
//! dearer to bring back: evicted ancestors that recomputing t rebuilds first, and evicted
//! descendants whose recomputation would now need t rebuilt (DTR's evicted components),
//! counted once each, up to [`NEIGHBOURHOOD`] producers. Staleness is the number of kernel
//! launches since t was last read or written (a logical clock, so a run and its simulation
//! decide alike), plus one. The lowest score is evicted; ties go to the lowest tensor id.
//!
//! Candidates are kept in a set with O(1) insertion and removal; pinned storages (operands
//! of the op running and of the ops recomputed for it) stay in the set and are skipped when
//! scoring. With sqrt sampling, about `sqrt(N)` of the `N` candidates, drawn from a seeded
//! stream, are scored (all of them when the sample holds only pinned ones).

use super::facts::Facts;
use crate::init::SplitMix64;
use sgc_ir::TensorId;

/// At most this many producers are summed into one candidate's recompute cost.
pub(crate) const NEIGHBOURHOOD: usize = 64;

const NONE: u32 = u32::MAX;

/// The eviction candidates (see the [module docs](self)).
pub(crate) struct Candidates {
    list: Vec<TensorId>,
    pos: Vec<u32>,
}

impl Candidates {
    pub fn new(num_tensors: usize) -> Self {
        Candidates {
            list: Vec::new(),
            pos: vec![NONE; num_tensors],
        }
    }

    pub fn contains(&self, t: TensorId) -> bool {
        self.pos[t.index()] != NONE
    }

    pub fn insert(&mut self, t: TensorId) {
        if !self.contains(t) {
            self.pos[t.index()] = self.list.len() as u32;
            self.list.push(t);
        }
    }

    pub fn remove(&mut self, t: TensorId) {
        let p = self.pos[t.index()];
        if p == NONE {
            return;
        }
        self.list.swap_remove(p as usize);
        if let Some(&moved) = self.list.get(p as usize) {
            self.pos[moved.index()] = p;
        }
        self.pos[t.index()] = NONE;
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// What scoring needs to see of the engine's state.
pub(crate) trait View {
    fn pinned(&self, t: TensorId) -> bool;
    /// Whether `t` is evicted (retained for recomputation, not resident).
    fn evicted(&self, t: TensorId) -> bool;
    fn last_access(&self, t: TensorId) -> u64;
}

/// Scores candidates; holds the sampling stream and the scratch marks of the walk.
pub(crate) struct Scorer {
    rng: SplitMix64,
    sqrt_sampling: bool,
    mark: Vec<u32>,
    epoch: u32,
    queue: Vec<TensorId>,
}

impl Scorer {
    pub fn new(num_tensors: usize, sqrt_sampling: bool, seed: u64) -> Self {
        Scorer {
            rng: SplitMix64::new(seed),
            sqrt_sampling,
            mark: vec![0; num_tensors],
            epoch: 0,
            queue: Vec::new(),
        }
    }

    /// The candidate to evict now, if any is unpinned.
    pub fn victim(
        &mut self,
        cands: &Candidates,
        facts: &Facts,
        state: &impl View,
        clock: u64,
    ) -> Option<TensorId> {
        let n = cands.len();
        if n == 0 {
            return None;
        }
        if self.sqrt_sampling {
            let k = (n as f64).sqrt().ceil() as usize;
            let sample: Vec<TensorId> = (0..k)
                .map(|_| cands.list[(self.rng.next_u64() % n as u64) as usize])
                .collect();
            if let Some(v) = self.best(sample.into_iter(), facts, state, clock) {
                return Some(v);
            }
        }
        let all = cands.list.clone();
        self.best(all.into_iter(), facts, state, clock)
    }

    fn best(
        &mut self,
        pool: impl Iterator<Item = TensorId>,
        facts: &Facts,
        state: &impl View,
        clock: u64,
    ) -> Option<TensorId> {
        let mut best: Option<(f64, TensorId)> = None;
        for t in pool {
            if state.pinned(t) {
                continue;
            }
            let s = self.score(t, facts, state, clock);
            let better = match best {
                None => true,
                Some((bs, bt)) => s < bs || (s == bs && t < bt),
            };
            if better {
                best = Some((s, t));
            }
        }
        best.map(|b| b.1)
    }

    /// DTR's score of `t` (lower is evicted first).
    pub fn score(&mut self, t: TensorId, facts: &Facts, state: &impl View, clock: u64) -> f64 {
        let cost = self.neighbourhood_cost(t, facts, state);
        let stale = clock.saturating_sub(state.last_access(t)) + 1;
        cost / (facts.size[t.index()].max(1) as f64 * stale as f64)
    }

    /// Cost of `t`'s producer plus the producers of its evicted neighbourhood.
    fn neighbourhood_cost(&mut self, t: TensorId, facts: &Facts, state: &impl View) -> f64 {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.queue.clear();
        self.queue.push(t);
        self.mark[t.index()] = epoch;
        let mut cost = 0.0;
        let mut counted = 0;
        let mut head = 0;
        while head < self.queue.len() && counted < NEIGHBOURHOOD {
            let x = self.queue[head];
            head += 1;
            let Some(p) = facts.producer[x.index()] else {
                continue;
            };
            cost += facts.cost[p.index()];
            counted += 1;
            let parents = facts.in_roots[p.index()].iter();
            for &y in parents.chain(&facts.children[x.index()]) {
                if self.mark[y.index()] != epoch && state.evicted(y) {
                    self.mark[y.index()] = epoch;
                    self.queue.push(y);
                }
            }
        }
        cost
    }
}
