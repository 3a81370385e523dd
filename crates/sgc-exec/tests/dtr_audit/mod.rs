//! An independent check of a run-time DTR trace: replays the engine's events against the
//! graph alone (not the engine's state) and reports every violation with the op and tensor
//! it concerns. Shared by the DTR tests.

#![allow(dead_code)]

use sgc_exec::dtr::{Event, FreeKind};
use sgc_ir::{Graph, OpId, TensorId, TensorKind};
use std::collections::HashMap;

/// Storage roots an op reads or writes.
fn operands(g: &Graph, op: OpId) -> Vec<TensorId> {
    let o = g.op(op);
    let mut v: Vec<TensorId> = o
        .inputs
        .iter()
        .chain(&o.outputs)
        .map(|&t| g.storage_root(t))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Every violation of the trace: overlapping live blocks, blocks outside the pool, an op
/// launched with an operand not resident, an eviction of a pinned storage (an operand of an
/// op being run or recomputed) or of one that may not be evicted.
pub fn violations(g: &Graph, memory: u64, trace: &[Event]) -> Vec<String> {
    let mut bad = Vec::new();
    let name = |t: TensorId| g.tensor(t).name.clone();
    let mut live: HashMap<TensorId, (u64, u64)> = HashMap::new();
    let mut stack: Vec<OpId> = Vec::new();
    // Puts `r` at `[off, off + len)`; the live block it lands on, if any.
    let settle = |live: &mut HashMap<TensorId, (u64, u64)>, r: TensorId, off: u64, len: u64| {
        let hit = live
            .iter()
            .find(|(&o, &(oo, ol))| o != r && off < oo + ol && oo < off + len)
            .map(|(&o, _)| o);
        live.insert(r, (off, len));
        hit
    };
    for (i, ev) in trace.iter().enumerate() {
        match *ev {
            Event::StepStart => {
                if !stack.is_empty() {
                    bad.push(format!(
                        "event {i}: a step starts inside op `{}`",
                        g.op(stack[0]).name
                    ));
                }
            }
            Event::Enter { op, .. } => stack.push(op),
            Event::Exit { op } => {
                if stack.pop() != Some(op) {
                    bad.push(format!(
                        "event {i}: exit of `{}` out of order",
                        g.op(op).name
                    ));
                }
            }
            Event::Launch { op, .. } => {
                if stack.last() != Some(&op) {
                    bad.push(format!(
                        "event {i}: `{}` launched outside its enter/exit",
                        g.op(op).name
                    ));
                }
                for r in operands(g, op) {
                    if !live.contains_key(&r) {
                        bad.push(format!(
                            "event {i}: `{}` launched with `{}` not resident",
                            g.op(op).name,
                            name(r)
                        ));
                    }
                }
            }
            Event::Alloc {
                root,
                offset,
                bytes,
            } => {
                if offset + bytes > memory {
                    bad.push(format!(
                        "event {i}: `{}` placed past the pool's end",
                        name(root)
                    ));
                }
                if live.contains_key(&root) {
                    bad.push(format!("event {i}: `{}` allocated twice", name(root)));
                }
                bad.extend(
                    settle(&mut live, root, offset, bytes).map(|o| {
                        format!("event {i}: `{}` overlaps live `{}`", name(root), name(o))
                    }),
                );
            }
            Event::Move {
                root,
                from,
                to,
                bytes,
            } => {
                if live.get(&root) != Some(&(from, bytes)) {
                    bad.push(format!(
                        "event {i}: `{}` moved from where it is not",
                        name(root)
                    ));
                }
                bad.extend(
                    settle(&mut live, root, to, bytes).map(|o| {
                        format!("event {i}: `{}` moved over live `{}`", name(root), name(o))
                    }),
                );
            }
            Event::Free { root, offset, why } => {
                if live.remove(&root).map(|b| b.0) != Some(offset) {
                    bad.push(format!("event {i}: `{}` freed where it is not", name(root)));
                }
                if matches!(why, FreeKind::Evict | FreeKind::Drop) {
                    let t = g.tensor(root);
                    let recomputable = g.producer(root).is_some_and(|p| g.op(p).recomputable);
                    let output = g.outputs().iter().any(|&o| g.storage_root(o) == root);
                    if t.kind != TensorKind::Activation || !recomputable || output {
                        bad.push(format!(
                            "event {i}: `{}` ({}) evicted but may not be",
                            name(root),
                            t.kind.as_str()
                        ));
                    }
                    for &op in &stack {
                        if operands(g, op).contains(&root) {
                            bad.push(format!(
                                "event {i}: `{}` evicted while pinned by `{}`",
                                name(root),
                                g.op(op).name
                            ));
                        }
                    }
                }
            }
        }
    }
    bad
}

/// How many events of each kind the trace has: (evictions, recomputations, moves).
pub fn counts(trace: &[Event]) -> (usize, usize, usize) {
    let evict = trace
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Free {
                    why: FreeKind::Evict,
                    ..
                }
            )
        })
        .count();
    let rec = trace
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Launch {
                    recompute: true,
                    ..
                }
            )
        })
        .count();
    let mv = trace
        .iter()
        .filter(|e| matches!(e, Event::Move { .. }))
        .count();
    (evict, rec, mv)
}
