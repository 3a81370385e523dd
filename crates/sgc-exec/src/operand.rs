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

/// One step of a [`View`]; each gives a contiguous tensor of the step's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewStep {
    /// The same elements with another shape.
    Reshape(Vec<usize>),
    /// `out.shape[i] = in.shape[perm[i]]`.
    Permute(Vec<usize>),
    /// Broadcast to this shape (axes aligned on the right).
    Expand(Vec<usize>),
    /// `in[.., start..end, ..]` along `axis`.
    Slice {
        axis: usize,
        start: usize,
        end: usize,
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
            ViewStep::Slice { axis, start, end } => {
                *axis < shape.len() && start <= end && *end <= shape[*axis]
            }
        }
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
