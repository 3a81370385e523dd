//! 128-bit fingerprints of the search's cache keys (genomes and discard plans).
//!
//! The evaluator's caches used to hold their keys whole: a genome's split list and a
//! discard plan's `(root, open, block begin)` triples, O(n) words each on a graph of n ops,
//! for every candidate ever evaluated (several gigabytes on a 30,000-op recurrent graph).
//! They now hold a fingerprint: two independent 64-bit lanes, each a chain of folded
//! 64x64->128-bit multiplications (the wyhash mix) over the key's words, finalised with the
//! length. Two distinct keys share a fingerprint with probability about 2^-128; over the
//! ~10^4 keys of a search, the chance of any collision is below 10^-30. A collision could
//! only misjudge one candidate's fitness, never make a plan invalid: the chosen plan is
//! measured again and verified.

/// A 128-bit fingerprint.
pub(crate) type Fingerprint = u128;

const LANE_A: (u64, u64) = (0xa076_1d64_78bd_642f, 0xe703_7ed1_a0b4_28db);
const LANE_B: (u64, u64) = (0x8ebc_6af0_9c88_c6e3, 0x5899_65cc_7537_4cc3);

/// Folded multiplication: the two halves of the 128-bit product, xored.
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// A fingerprint under construction, fed 32-bit words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fingerprinter {
    a: u64,
    b: u64,
    len: u64,
    /// A word waiting for its pair (lanes take 64 bits at a time).
    half: Option<u32>,
}

impl Default for Fingerprinter {
    fn default() -> Self {
        Fingerprinter {
            a: LANE_A.0,
            b: LANE_B.0,
            len: 0,
            half: None,
        }
    }
}

impl Fingerprinter {
    pub fn word(&mut self, w: u32) {
        self.len += 1;
        match self.half.take() {
            None => self.half = Some(w),
            Some(h) => self.mix(u64::from(h) | u64::from(w) << 32),
        }
    }

    pub fn words(&mut self, ws: &[u32]) {
        for &w in ws {
            self.word(w);
        }
    }

    fn mix(&mut self, x: u64) {
        self.a = fold(self.a ^ x, LANE_A.1);
        self.b = fold(self.b ^ x.rotate_left(29), LANE_B.1) ^ x;
    }

    pub fn finish(mut self) -> Fingerprint {
        if let Some(h) = self.half.take() {
            self.mix(u64::from(h) | 1 << 63);
        }
        let a = fold(self.a ^ self.len, LANE_A.0 ^ LANE_B.1);
        let b = fold(self.b ^ self.len.rotate_left(32), LANE_B.0 ^ LANE_A.1);
        u128::from(a) << 64 | u128::from(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(ws: &[u32]) -> Fingerprint {
        let mut f = Fingerprinter::default();
        f.words(ws);
        f.finish()
    }

    /// Sequences that differ in one word, in length, or by a trailing zero get different
    /// fingerprints; and no two of many similar short sequences collide in either lane.
    #[test]
    fn close_keys_get_distinct_fingerprints() {
        assert_ne!(fp(&[]), fp(&[0]));
        assert_ne!(fp(&[0]), fp(&[0, 0]));
        assert_ne!(fp(&[1, 2, 3]), fp(&[1, 2, 3, 0]));
        assert_ne!(fp(&[1, 2]), fp(&[2, 1]));
        let mut seen_a = std::collections::HashSet::new();
        let mut seen_b = std::collections::HashSet::new();
        for x in 0..200u32 {
            for y in 0..200u32 {
                let f = fp(&[7, x, 9, y]);
                assert!(seen_a.insert((f >> 64) as u64), "lane a: {x} {y}");
                assert!(seen_b.insert(f as u64), "lane b: {x} {y}");
            }
        }
    }
}
