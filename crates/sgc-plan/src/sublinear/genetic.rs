//! Genetic refinement of split-point sets (MegEngine's `genetic_nr_iter`).
//!
//! Each generation sorts the population, keeps up to `pool_size` survivors (the best three
//! quarters of the pool by fitness, the rest drawn at random from the others, so some
//! diversity survives), and makes two children per survivor: one by two mutations (pick a
//! split point, then insert a new point before it, delete it, move it between its
//! neighbours, or leave it), one by crossover with another random survivor (the points
//! before a random cut from one parent, the rest from the other). Children are generated
//! sequentially from one seeded ChaCha8 stream and evaluated in parallel, so the result is
//! the same for any number of workers. The population keeps the best candidates ever
//! evaluated, so the search never ends worse than it started.

use crate::sublinear::genome::Genome;
use crate::sublinear::search::{sort_population, Evaluator, Member};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The stride between the random streams of a refinement's islands (2^64 over the golden
/// ratio), so that nearby seeds give unrelated streams.
const STREAM_STRIDE: u64 = 0x9E37_79B9_7F4A_7C15;

/// An independent run of the refinement: its population and its random stream.
pub(crate) struct Island {
    pub pop: Vec<Member>,
    pub rng: ChaCha8Rng,
}

/// `count` islands: island `k` starts from `pop(k)`, with the stream of seed
/// `seed + k * STREAM_STRIDE`.
pub(crate) fn islands(count: u64, seed: u64, pop: impl Fn(u64) -> Vec<Member>) -> Vec<Island> {
    (0..count)
        .map(|k| Island {
            pop: pop(k),
            rng: ChaCha8Rng::seed_from_u64(seed.wrapping_add(k.wrapping_mul(STREAM_STRIDE))),
        })
        .collect()
}

/// Runs `iters` generations on every island in lockstep: each island makes its children
/// from its own stream, and all children of a generation are evaluated as one batch (which
/// keeps the workers busy; the result is the same as running the islands one after the
/// other). Leaves every population sorted, best first.
pub(crate) fn refine(
    ev: &mut Evaluator<'_>,
    islands: &mut [Island],
    iters: usize,
    pool_size: usize,
) {
    let n = ev.ctx.n as u32;
    for island in islands.iter_mut() {
        sort_population(&mut island.pop, ev.objective);
    }
    // Per island, every genome that ever joined its population. One that left it cannot
    // come back: the population keeps the best ever, so whatever beat it still does.
    let mut known: Vec<rustc_hash::FxHashSet<_>> = islands
        .iter()
        .map(|island| island.pop.iter().map(|m| m.genome.fingerprint()).collect())
        .collect();
    for gen in 0..iters {
        let broods: Vec<Vec<Genome>> = islands
            .iter_mut()
            .map(|island| brood(&island.pop, pool_size, n, &mut island.rng))
            .collect();
        let sizes: Vec<usize> = broods.iter().map(Vec::len).collect();
        let all: Vec<Genome> = broods.into_iter().flatten().collect();
        let (fits, prints) = ev.eval_batch_printed(&all);
        let mut children = all.into_iter().zip(fits).zip(prints);
        for ((island, size), known) in islands.iter_mut().zip(sizes).zip(&mut known) {
            let pop = &mut island.pop;
            for ((genome, fitness), print) in children.by_ref().take(size) {
                if known.insert(print) {
                    pop.push(Member { genome, fitness });
                }
            }
            sort_population(pop, ev.objective);
            pop.truncate(4 * pool_size.max(1));
        }
        ev.report("genetic refinement", gen + 1, iters);
    }
}

/// One generation's children of a population: two per survivor.
fn brood(pop: &[Member], pool_size: usize, n: u32, rng: &mut ChaCha8Rng) -> Vec<Genome> {
    let survivors = select(pop, pool_size, rng);
    let mut children = Vec::with_capacity(2 * survivors.len());
    for (i, s) in survivors.iter().enumerate() {
        children.push(mutate(&mutate(s, n, rng), n, rng));
        let j = if survivors.len() > 1 {
            let j = rng.random_range(0..survivors.len() - 1);
            j + usize::from(j >= i)
        } else {
            i
        };
        children.push(crossover(s, &survivors[j], n, rng));
    }
    children
}

/// Survivors: the best three quarters of the pool, then random others.
fn select(pop: &[Member], pool_size: usize, rng: &mut ChaCha8Rng) -> Vec<Genome> {
    let pool = pool_size.max(1).min(pop.len());
    let elite = pool.div_ceil(4) * 3;
    let elite = elite.min(pool);
    let mut out: Vec<Genome> = pop[..elite].iter().map(|m| m.genome.clone()).collect();
    let mut rest: Vec<usize> = (elite..pop.len()).collect();
    while out.len() < pool && !rest.is_empty() {
        let k = rng.random_range(0..rest.len());
        out.push(pop[rest.swap_remove(k)].genome.clone());
    }
    out
}

/// One mutation of one split point (or a new point when there is none).
fn mutate(g: &Genome, n: u32, rng: &mut ChaCha8Rng) -> Genome {
    let mut s = g.splits.clone();
    if n == 0 {
        return g.clone();
    }
    if s.is_empty() {
        s.push(rng.random_range(0..n));
        return g.with_splits(s);
    }
    let j = rng.random_range(0..s.len());
    let lo = if j == 0 { 0 } else { s[j - 1] + 1 };
    let hi = s.get(j + 1).copied().unwrap_or(n); // exclusive
    match rng.random_range(0..4u8) {
        0 if lo < s[j] => s.insert(j, rng.random_range(lo..s[j])),
        1 => {
            s.remove(j);
        }
        2 if lo < hi => s[j] = rng.random_range(lo..hi),
        _ => {}
    }
    g.with_splits(s)
}

/// Points of `a` before a random cut, points of `b` from the cut on.
fn crossover(a: &Genome, b: &Genome, n: u32, rng: &mut ChaCha8Rng) -> Genome {
    let cut = if n == 0 { 0 } else { rng.random_range(0..n) };
    let s = a
        .splits
        .iter()
        .copied()
        .filter(|&p| p < cut)
        .chain(b.splits.iter().copied().filter(|&p| p >= cut))
        .collect();
    a.with_splits(s)
}
