//! A split-based candidate of the search: its split points, the roots it keeps, and the
//! variant of the discard and recomputation rules it runs under. Plain data, read by the
//! discard plan ([`super::discard`]), the walk ([`super::recompute`]) and the searches.

use crate::sublinear::fingerprint::{Fingerprint, Fingerprinter};

/// A split-based candidate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Genome {
    /// Sorted, distinct op positions that close a block.
    pub splits: Vec<u32>,
    /// Sorted, distinct roots never discarded (set by the memory-for-speed relaxation).
    pub keep: Vec<u32>,
    /// Which variant of the discard and recomputation rules applies.
    pub rules: Rules,
}

/// Switches between variants of MegEngine's rules (all off: MegEngine's own). Each one
/// wins on some graphs and loses on others. The genetic search runs under MegEngine's own
/// rules (with the variants mixed into its population it settled in worse plans more often
/// on the real corpus, for the same number of candidates); the local climb
/// ([`super::polish`]) and Chen's plan try every variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Rules {
    /// Recomputation reaches past the block start: a missing input made in an earlier
    /// block is recomputed too instead of being read from its original (see
    /// [`super::recompute`]); still at most one recomputation per op.
    pub unbounded: bool,
    /// Discards whose gap closes in the very next block are kept (MegEngine cancels them).
    pub next_block: bool,
    /// A storage may be discarded right after it is made even when it is its producer's
    /// only output read later (MegEngine never does).
    pub at_creation: bool,
    /// Only storages made by forward ops are discarded, and only forward ops run again
    /// (older or other storages are read as they are): Chen's plan, which promises at most
    /// one forward pass of recompute on any graph, phases interleaved or not. Not a gene the
    /// search varies.
    pub forward_only: bool,
}

impl Rules {
    /// Every variant, MegEngine's first.
    pub fn all() -> [Rules; 8] {
        std::array::from_fn(|k| Rules {
            unbounded: k & 1 != 0,
            next_block: k & 2 != 0,
            at_creation: k & 4 != 0,
            forward_only: false,
        })
    }

    /// The variant with switch `k` (0..3) flipped.
    pub fn flipped(self, k: u8) -> Rules {
        let mut r = self;
        match k % 3 {
            0 => r.unbounded = !r.unbounded,
            1 => r.next_block = !r.next_block,
            _ => r.at_creation = !r.at_creation,
        }
        r
    }
}

impl Genome {
    pub fn from_splits(mut splits: Vec<u32>) -> Genome {
        splits.sort_unstable();
        splits.dedup();
        Genome {
            splits,
            keep: Vec::new(),
            rules: Rules::default(),
        }
    }

    /// A genome with other split points and this one's kept roots and rules.
    pub fn with_splits(&self, splits: Vec<u32>) -> Genome {
        let mut out = Genome::from_splits(splits);
        out.keep = self.keep.clone();
        out.rules = self.rules;
        out
    }

    /// The same genome under `rules`.
    pub fn with_rules(mut self, rules: Rules) -> Genome {
        self.rules = rules;
        self
    }

    /// The genome under every variant of the rules.
    pub fn variants(&self) -> impl Iterator<Item = Genome> + '_ {
        Rules::all().into_iter().map(|r| {
            self.clone().with_rules(Rules {
                forward_only: self.rules.forward_only,
                ..r
            })
        })
    }

    /// The genome's fingerprint (the evaluator's cache key: see [`super::fingerprint`]).
    pub fn fingerprint(&self) -> Fingerprint {
        let r = self.rules;
        let mut f = Fingerprinter::default();
        f.word(self.splits.len() as u32);
        f.words(&self.splits);
        f.word(self.keep.len() as u32);
        f.words(&self.keep);
        f.word(
            u32::from(r.unbounded)
                | u32::from(r.next_block) << 1
                | u32::from(r.at_creation) << 2
                | u32::from(r.forward_only) << 3,
        );
        f.finish()
    }

    /// The split points that bound recomputation: none when it is unbounded.
    pub fn bounds(&self) -> &[u32] {
        if self.rules.unbounded {
            &[]
        } else {
            &self.splits
        }
    }
}

/// A genome for tests: 1 to 6 split points drawn anywhere among `n` positions, MegEngine's
/// rules.
#[cfg(test)]
pub(crate) fn random_splits(rng: &mut sgc_ir::testgen::SplitMix64, n: usize) -> Genome {
    let k = 1 + rng.index(6);
    Genome::from_splits((0..k).map(|_| rng.index(n.max(1)) as u32).collect())
}
