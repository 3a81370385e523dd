//! The device allocator under run-time DTR: one pool of `--memory` bytes, as a caching
//! allocator sees the device.
//!
//! - **Best fit with coalescing.** A request (rounded up to the alignment) takes the
//!   smallest free block that holds it (ties: the lowest address); the rest of that block
//!   stays free. A freed block merges with a free neighbour on either side, so free space
//!   is never split at an address where nothing is live.
//! - **Defragmentation.** When no free block holds a request although the free bytes add
//!   up to it, [`Pool::compact`] slides every live block down to the lowest addresses, in
//!   address order, and returns the moves; the caller copies the bytes (a real copy on a
//!   backend, a modelled one in simulation). Moving in ascending order never overwrites a
//!   block not yet moved: each destination ends at or below its source's start, or
//!   overlaps only the source itself.
//! - **Counters.** Allocations, frees, the most bytes live at once, the highest address
//!   ever handed out ("bytes touched": what a growing allocator would have reserved from
//!   the device), compactions and bytes moved.
//!
//! [`Pool::check`] verifies the invariants (live and free blocks tile the pool, none
//! overlaps another, no two free blocks touch); debug builds run it after every change.

use sgc_ir::free_blocks::FreeBlocks;
use sgc_ir::TensorId;
use std::collections::BTreeMap;

/// A live block: its size (aligned) and the storage it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub bytes: u64,
    pub owner: TensorId,
}

/// One move of a compaction: `bytes` of `owner` from `from` to `to` (`to < from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub owner: TensorId,
    pub from: u64,
    pub to: u64,
    pub bytes: u64,
}

/// What the pool has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub allocations: u64,
    pub frees: u64,
    /// Bytes live now (aligned).
    pub live_bytes: u64,
    /// The most bytes live at once.
    pub peak_live_bytes: u64,
    /// The highest end address ever handed out.
    pub touched_bytes: u64,
    pub compactions: u64,
    pub moved_bytes: u64,
}

/// The pool: see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Pool {
    size: u64,
    align: u64,
    free: FreeBlocks,
    live: BTreeMap<u64, Block>,
    stats: PoolStats,
}

/// A broken invariant, found by [`Pool::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolViolation(pub String);

impl Pool {
    /// An empty pool of `size` bytes handing out multiples of `align` (at least 1).
    pub fn new(size: u64, align: u64) -> Pool {
        let align = align.max(1);
        let size = size - size % align;
        let mut p = Pool {
            size,
            align,
            free: FreeBlocks::default(),
            live: BTreeMap::new(),
            stats: PoolStats::default(),
        };
        if size > 0 {
            p.free.insert(0, size);
        }
        p
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// The block size a request of `bytes` takes: rounded up to the alignment, at least
    /// one alignment unit (an empty tensor still gets an address of its own).
    pub fn block_size(&self, bytes: u64) -> u64 {
        bytes.max(1).div_ceil(self.align).saturating_mul(self.align)
    }

    /// Free bytes in all.
    pub fn free_bytes(&self) -> u64 {
        self.size - self.stats.live_bytes
    }

    /// The largest free block.
    pub fn largest_free(&self) -> u64 {
        self.free.largest()
    }

    /// The live block at `offset`.
    pub fn block_at(&self, offset: u64) -> Option<Block> {
        self.live.get(&offset).copied()
    }

    /// Live blocks in address order.
    pub fn live_blocks(&self) -> impl Iterator<Item = (u64, Block)> + '_ {
        self.live.iter().map(|(&o, &b)| (o, b))
    }

    /// Best fit: the offset of a new block of [`Self::block_size`]`(bytes)` for `owner`, or
    /// `None` when no free block holds it.
    pub fn alloc(&mut self, bytes: u64, owner: TensorId) -> Option<u64> {
        let need = self.block_size(bytes);
        let offset = self.free.take_best_fit(need)?;
        self.live.insert(offset, Block { bytes: need, owner });
        let s = &mut self.stats;
        s.allocations += 1;
        s.live_bytes += need;
        s.peak_live_bytes = s.peak_live_bytes.max(s.live_bytes);
        s.touched_bytes = s.touched_bytes.max(offset + need);
        self.debug_check();
        Some(offset)
    }

    /// Frees the live block at `offset`, merging it with free neighbours; returns it.
    pub fn free(&mut self, offset: u64) -> Option<Block> {
        let block = self.live.remove(&offset)?;
        let (start, len) = self.free.merge_neighbours(offset, block.bytes);
        self.free.insert(start, len);
        self.stats.frees += 1;
        self.stats.live_bytes -= block.bytes;
        self.debug_check();
        Some(block)
    }

    /// Slides every live block down to the lowest addresses (address order kept); returns
    /// the moves, in the order they must be copied. Afterwards all free space is one block
    /// at the top.
    pub fn compact(&mut self) -> Vec<Move> {
        let mut moves = Vec::new();
        let mut cursor = 0u64;
        let old = std::mem::take(&mut self.live);
        for (offset, block) in old {
            if offset != cursor {
                moves.push(Move {
                    owner: block.owner,
                    from: offset,
                    to: cursor,
                    bytes: block.bytes,
                });
            }
            self.live.insert(cursor, block);
            cursor += block.bytes;
        }
        self.free.clear();
        if cursor < self.size {
            self.free.insert(cursor, self.size - cursor);
        }
        self.stats.compactions += 1;
        self.stats.moved_bytes += moves.iter().map(|m| m.bytes).sum::<u64>();
        self.debug_check();
        moves
    }

    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(v) = self.check() {
            panic!("DTR pool invariant broken: {}", v.0);
        }
    }

    /// Checks that live and free blocks tile `0..size` exactly, aligned, with no overlap,
    /// no two free blocks adjacent, and the counters agree.
    pub fn check(&self) -> Result<(), PoolViolation> {
        let err = |s: String| Err(PoolViolation(s));
        if !self.free.consistent() {
            return err("the two free-block indexes differ".into());
        }
        let mut blocks: Vec<(u64, u64, bool)> = self
            .live
            .iter()
            .map(|(&o, b)| (o, b.bytes, true))
            .chain(self.free.iter().map(|(o, l)| (o, l, false)))
            .collect();
        blocks.sort_unstable();
        let mut cursor = 0u64;
        let mut prev_free = false;
        let mut live = 0u64;
        for &(o, len, is_live) in &blocks {
            if o != cursor {
                return err(format!(
                    "block at {o} does not start where the previous ends ({cursor}): overlap or hole"
                ));
            }
            if len == 0 || o % self.align != 0 || len % self.align != 0 {
                return err(format!(
                    "block at {o} of {len} bytes is empty or misaligned"
                ));
            }
            if !is_live && prev_free {
                return err(format!(
                    "free block at {o} touches the free block before it"
                ));
            }
            if is_live {
                live += len;
            }
            prev_free = !is_live;
            cursor = o + len;
        }
        if cursor != self.size {
            return err(format!("blocks end at {cursor}, the pool at {}", self.size));
        }
        if live != self.stats.live_bytes {
            return err(format!(
                "live blocks add up to {live} bytes, the counter says {}",
                self.stats.live_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: usize) -> TensorId {
        TensorId::new(i)
    }

    #[test]
    fn best_fit_takes_the_smallest_block_that_holds_the_request() {
        let mut p = Pool::new(1000, 10);
        let a = p.alloc(100, t(0)).unwrap();
        let b = p.alloc(300, t(1)).unwrap();
        let c = p.alloc(100, t(2)).unwrap();
        let _d = p.alloc(100, t(3)).unwrap();
        p.free(a);
        p.free(c);
        // Free now: [0, 100), [400, 500) and [600, 1000): the first 100-byte block wins.
        assert_eq!(p.alloc(50, t(4)), Some(0));
        assert_eq!(b, 100);
        assert_eq!(p.largest_free(), 400);
        p.check().unwrap();
    }

    /// A 400-byte pool of four 100-byte blocks, the first and the third freed.
    fn every_other_block_free() -> (Pool, Vec<u64>) {
        let mut p = Pool::new(400, 1);
        let offs: Vec<u64> = (0..4).map(|i| p.alloc(100, t(i)).unwrap()).collect();
        p.free(offs[0]);
        p.free(offs[2]);
        (p, offs)
    }

    #[test]
    fn freed_neighbours_coalesce() {
        let (mut p, offs) = every_other_block_free();
        assert_eq!(p.largest_free(), 100);
        p.free(offs[1]);
        assert_eq!(p.largest_free(), 300);
        p.free(offs[3]);
        assert_eq!(p.largest_free(), 400);
        p.check().unwrap();
    }

    #[test]
    fn scattered_free_blocks_do_not_serve_a_larger_request_until_compacted() {
        let (mut p, _) = every_other_block_free();
        assert_eq!(p.free_bytes(), 200);
        assert_eq!(p.alloc(200, t(9)), None);
        let moves = p.compact();
        assert_eq!(
            moves,
            vec![
                Move {
                    owner: t(1),
                    from: 100,
                    to: 0,
                    bytes: 100
                },
                Move {
                    owner: t(3),
                    from: 300,
                    to: 100,
                    bytes: 100
                },
            ]
        );
        assert_eq!(p.alloc(200, t(9)), Some(200));
        assert_eq!(p.stats().moved_bytes, 200);
        assert_eq!(p.stats().touched_bytes, 400);
        p.check().unwrap();
    }

    #[test]
    fn sizes_round_up_to_the_alignment() {
        let mut p = Pool::new(1024, 256);
        assert_eq!(p.alloc(1, t(0)), Some(0));
        assert_eq!(p.alloc(0, t(1)), Some(256));
        assert_eq!(p.alloc(257, t(2)), Some(512));
        assert_eq!(p.alloc(1, t(3)), None);
        assert_eq!(p.stats().peak_live_bytes, 1024);
    }
}
