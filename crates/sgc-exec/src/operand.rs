//! What a kernel reads and writes: an [`Operand`] is a tensor at a byte offset of a
//! [`BufferId`], contiguous or a [`View`] of a stored tensor. Plain data, shared by the op
//! families' checks and every backend.

use sgc_ir::DType;

/// A buffer made by [`crate::backend::Backend::alloc`], valid for the backend that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId(pub usize);

/// A tensor as a kernel sees it: `numel(shape)` elements of `dtype`, contiguous
/// (row-major), starting `offset` bytes into `buffer`; or, with a [`View`], a read-only
/// view of the contiguous tensor stored there (a transposed, broadcast or sliced view
/// that an exported graph declares as an alias), materialised by the backend on read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    pub buffer: BufferId,
    pub offset: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub view: Option<Box<View>>,
}

/// How a view operand derives from the tensor stored at its offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Shape of the stored (contiguous) tensor.
    pub base: Vec<usize>,
    /// Steps from the stored tensor to the operand, in order.
    pub steps: Vec<ViewStep>,
}

impl View {
    /// The same view over elements read as `words` 4-byte words each (an i64 view as
    /// f32 words, `words` = 2): every shape gains a last axis of `words`. A backend
    /// materialises it with its f32 copies, which move bits unchanged.
    pub fn widened(&self, words: usize) -> View {
        let wide = |s: &[usize]| s.iter().copied().chain([words]).collect::<Vec<usize>>();
        let steps = self
            .steps
            .iter()
            .map(|step| match step {
                ViewStep::Reshape(to) => ViewStep::Reshape(wide(to)),
                ViewStep::Expand(to) => ViewStep::Expand(wide(to)),
                ViewStep::Permute(perm) => {
                    ViewStep::Permute(perm.iter().copied().chain([perm.len()]).collect())
                }
                slice @ ViewStep::Slice { .. } => slice.clone(),
            })
            .collect();
        View {
            base: wide(&self.base),
            steps,
        }
    }
}

impl View {
    /// For each element of the view, row-major in its shape, the row-major index of the
    /// element of the stored tensor it reads: the view as a gather, for any dtype (what
    /// reading a view back to the host needs). `None` when a step does not fit.
    pub fn indices(&self) -> Option<Vec<usize>> {
        let mut shape = self.base.clone();
        let mut idx: Vec<usize> = (0..shape.iter().product()).collect();
        for step in &self.steps {
            if !step.fits(&shape) {
                return None;
            }
            let (to, order) = match step {
                ViewStep::Reshape(to) => (to.clone(), idx),
                ViewStep::Permute(perm) => {
                    let to: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                    let from = strides(&shape);
                    let along: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
                    (to.clone(), gather(&idx, &to, 0, |i, a| i * along[a]))
                }
                ViewStep::Expand(to) => {
                    let lead = to.len() - shape.len();
                    let from = strides(&shape);
                    let along: Vec<usize> = (0..to.len())
                        .map(|a| match a.checked_sub(lead) {
                            Some(b) if shape[b] != 1 => from[b],
                            _ => 0,
                        })
                        .collect();
                    (to.clone(), gather(&idx, to, 0, |i, a| i * along[a]))
                }
                ViewStep::Slice {
                    axis,
                    start,
                    step: by,
                    ..
                } => {
                    let to = step.sliced(&shape);
                    let mut along = strides(&shape);
                    let base = start * along[*axis];
                    along[*axis] *= by;
                    let order = gather(&idx, &to, base, |i, a| i * along[a]);
                    (to, order)
                }
            };
            shape = to;
            idx = order;
        }
        Some(idx)
    }
}

/// Row-major strides of `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// `idx[offset(m)]` for every multi-index `m` of `shape` in row-major order, where
/// `offset(m) = base + sum over axes a of term(m[a], a)`.
fn gather(
    idx: &[usize],
    shape: &[usize],
    base: usize,
    term: impl Fn(usize, usize) -> usize,
) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut m = vec![0usize; shape.len()];
    for _ in 0..n {
        let at = base
            + m.iter()
                .enumerate()
                .map(|(a, &i)| term(i, a))
                .sum::<usize>();
        out.push(idx[at]);
        for a in (0..shape.len()).rev() {
            m[a] += 1;
            if m[a] < shape[a] {
                break;
            }
            m[a] = 0;
        }
    }
    out
}

/// One step of a [`View`]; each gives a contiguous tensor of the step's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewStep {
    /// The same elements with another shape.
    Reshape(Vec<usize>),
    /// `out.shape[i] = in.shape[perm[i]]`.
    Permute(Vec<usize>),
    /// Broadcast to this shape (axes aligned on the right).
    Expand(Vec<usize>),
    /// `in[.., start..end:step, ..]` along `axis`: `(end - start).div_ceil(step)`
    /// elements (`step >= 1`).
    Slice {
        axis: usize,
        start: usize,
        end: usize,
        step: usize,
    },
}

/// Whether `x` broadcasts to `y`: axes aligned on the right, each equal or 1 in `x`.
pub(crate) fn broadcasts(x: &[usize], y: &[usize]) -> bool {
    x.len() <= y.len()
        && x.iter()
            .rev()
            .zip(y.iter().rev())
            .all(|(a, b)| a == b || *a == 1)
}

impl ViewStep {
    /// Whether a view step can be applied to a tensor of `shape` (kernels index in bounds).
    pub fn fits(&self, shape: &[usize]) -> bool {
        match self {
            ViewStep::Reshape(to) => {
                to.iter().product::<usize>() == shape.iter().product::<usize>()
            }
            ViewStep::Permute(perm) => {
                let mut seen = vec![false; shape.len()];
                perm.len() == shape.len()
                    && perm
                        .iter()
                        .all(|&p| p < shape.len() && !std::mem::replace(&mut seen[p], true))
            }
            ViewStep::Expand(to) => broadcasts(shape, to),
            ViewStep::Slice {
                axis,
                start,
                end,
                step,
            } => *axis < shape.len() && start <= end && *end <= shape[*axis] && *step >= 1,
        }
    }

    /// The shape a slice step gives `shape` (`shape` itself for any other step kind);
    /// the step must [fit](Self::fits).
    pub fn sliced(&self, shape: &[usize]) -> Vec<usize> {
        let mut to = shape.to_vec();
        if let ViewStep::Slice {
            axis,
            start,
            end,
            step,
        } = self
        {
            to[*axis] = (end - start).div_ceil(*step);
        }
        to
    }
}

impl Operand {
    /// A plain contiguous operand.
    pub fn new(buffer: BufferId, offset: u64, dtype: DType, shape: Vec<usize>) -> Operand {
        Operand {
            buffer,
            offset,
            dtype,
            shape,
            view: None,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes the operand spans in its buffer (a view: the stored tensor's).
    pub fn bytes(&self) -> u64 {
        let n: usize = match &self.view {
            Some(v) => v.base.iter().product(),
            None => self.numel(),
        };
        n as u64 * self.dtype.size()
    }

    /// Whether the byte ranges of two operands intersect.
    pub fn overlaps(&self, other: &Operand) -> bool {
        self.buffer == other.buffer
            && self.bytes() > 0
            && other.bytes() > 0
            && self.offset < other.offset + other.bytes()
            && other.offset < self.offset + self.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_as_a_gather_reads_what_its_steps_read() {
        // base [2, 3]: 0 1 2 / 3 4 5; columns 1..3 -> [2, 2]: 1 2 / 4 5; transposed: 1 4 / 2 5.
        let v = View {
            base: vec![2, 3],
            steps: vec![
                ViewStep::Slice {
                    axis: 1,
                    start: 1,
                    end: 3,
                    step: 1,
                },
                ViewStep::Permute(vec![1, 0]),
            ],
        };
        assert_eq!(v.indices(), Some(vec![1, 4, 2, 5]));
        // Row 1 of the base, broadcast to [2, 1, 3]; then flattened.
        let v = View {
            base: vec![2, 3],
            steps: vec![
                ViewStep::Slice {
                    axis: 0,
                    start: 1,
                    end: 2,
                    step: 1,
                },
                ViewStep::Expand(vec![2, 1, 3]),
                ViewStep::Reshape(vec![6]),
            ],
        };
        assert_eq!(v.indices(), Some(vec![3, 4, 5, 3, 4, 5]));
        // base [2, 5]: every other column from 1 (Swin's patch merging, `x[..., 1::2]`),
        // then columns from 0 by 3 of that: 1 3 / 6 8, then 1 / 6.
        let strided = |start, end, step| ViewStep::Slice {
            axis: 1,
            start,
            end,
            step,
        };
        let v = View {
            base: vec![2, 5],
            steps: vec![strided(1, 5, 2)],
        };
        assert_eq!(v.indices(), Some(vec![1, 3, 6, 8]));
        let v = View {
            base: vec![2, 5],
            steps: vec![strided(1, 5, 2), strided(0, 2, 3)],
        };
        assert_eq!(v.indices(), Some(vec![1, 6]));
        let zero = View {
            base: vec![2, 5],
            steps: vec![strided(0, 5, 0)],
        };
        assert_eq!(zero.indices(), None);
        let bad = View {
            base: vec![2],
            steps: vec![ViewStep::Slice {
                axis: 0,
                start: 1,
                end: 3,
                step: 1,
            }],
        };
        assert_eq!(bad.indices(), None);
    }
}
