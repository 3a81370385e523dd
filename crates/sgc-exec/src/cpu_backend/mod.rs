//! The CPU reference backend: f32 kernels in plain Rust, matmul through
//! `matrixmultiply::sgemm`, convolution through im2col + sgemm.
//!
//! Buffers are 8-byte aligned host allocations. [`Backend::launch`] checks every operand
//! (inside its buffer, aligned for its dtype, written operands overlapping nothing), then
//! hands the kernel plain slices. Each op type is one function of the same name, in
//! `linalg`, `elementwise`, `conv`, `norm` and `shape`; the CUDA backend has the same
//! names. Every reduction runs in a fixed order (the GEMM splits its output among threads,
//! never a sum), so a recomputed tensor is bitwise identical to the first computation
//! whatever the thread count. Reductions over the batch (bias gradients, pooling means,
//! norm statistics, losses) accumulate in f64. `aten` holds the exporter's ops that no
//! builder kernel computes; views of exported graphs are materialised on read.

mod aten;
mod conv;
mod elementwise;
mod linalg;
mod norm;
mod shape;

use crate::backend::{check_disjoint, AllocStats, Backend, BufferId, Operand, View, ViewStep};
use crate::kernel::{BinOp, Kernel};
use crate::{ExecError, KernelError};
use sgc_ir::DType;

const NAME: &str = "cpu";

/// Integer indices read by `embedding` and `cross_entropy` (i64 or i32).
pub(crate) enum Indices<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
}

impl Indices<'_> {
    fn len(&self) -> usize {
        match self {
            Indices::I64(v) => v.len(),
            Indices::I32(v) => v.len(),
        }
    }

    /// Index `r` as written.
    fn raw(&self, r: usize) -> i64 {
        match self {
            Indices::I64(v) => v[r],
            Indices::I32(v) => i64::from(v[r]),
        }
    }

    /// Index `r`, checked to lie in `0..bound`.
    fn get(&self, r: usize, bound: usize) -> Result<usize, KernelError> {
        let v = match self {
            Indices::I64(v) => v[r],
            Indices::I32(v) => i64::from(v[r]),
        };
        usize::try_from(v)
            .ok()
            .filter(|&u| u < bound)
            .ok_or(KernelError::Index {
                index: v,
                position: r,
                bound,
            })
    }
}

/// An operand resolved to host memory.
enum Slice<'a> {
    F32(&'a [f32]),
    Idx(Indices<'a>),
}

/// The CPU device: host buffers and allocation counters.
#[derive(Default)]
pub struct CpuBackend {
    buffers: Vec<(Vec<u64>, u64)>,
    stats: AllocStats,
    /// Runs so far of each random op (by its seed): the stream position of its next draw.
    draws: std::collections::HashMap<u64, u64>,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn buffer(&self, id: BufferId) -> Result<&(Vec<u64>, u64), ExecError> {
        self.buffers
            .get(id.0)
            .ok_or_else(|| ExecError::backend(NAME, format!("no buffer {}", id.0)))
    }

    /// Byte range of `op` inside its buffer, checked for bounds and alignment.
    fn range(&self, op: &Operand) -> Result<(usize, usize), ExecError> {
        let (_, len) = self.buffer(op.buffer)?;
        let end = op.offset.checked_add(op.bytes());
        if end.is_none_or(|e| e > *len) || op.offset % op.dtype.size() != 0 {
            return Err(ExecError::backend(
                NAME,
                format!(
                    "operand at offset {} ({} bytes of {}) is outside buffer {} ({len} bytes) or misaligned",
                    op.offset,
                    op.bytes(),
                    op.dtype.as_str(),
                    op.buffer.0
                ),
            ));
        }
        Ok((op.offset as usize, op.bytes() as usize))
    }

    /// Raw pointer to the first byte of `op`, after [`Self::range`] checked it.
    fn ptr(&mut self, op: &Operand) -> Result<*mut u8, ExecError> {
        let (start, _) = self.range(op)?;
        let base = self.buffers[op.buffer.0].0.as_mut_ptr() as *mut u8;
        // SAFETY: `range` checked that start + bytes lies inside the buffer.
        Ok(unsafe { base.add(start) })
    }

    fn read_slice<'a>(&mut self, op: &Operand) -> Result<Slice<'a>, ExecError> {
        let p = self.ptr(op)?;
        let n = op.numel();
        // SAFETY: in bounds and aligned (checked in `range`); no written operand overlaps a
        // read one (`check_disjoint`; an input an output exactly is gets copied in `launch`
        // and never goes through here), and the slices live only for one `launch` call,
        // during which the buffers are neither resized nor freed.
        Ok(unsafe {
            match op.dtype {
                DType::F32 => Slice::F32(std::slice::from_raw_parts(p as *const f32, n)),
                DType::I64 => {
                    Slice::Idx(Indices::I64(std::slice::from_raw_parts(p as *const i64, n)))
                }
                DType::I32 => {
                    Slice::Idx(Indices::I32(std::slice::from_raw_parts(p as *const i32, n)))
                }
                d => {
                    return Err(ExecError::backend(
                        NAME,
                        format!("dtype {} not supported", d.as_str()),
                    ))
                }
            }
        })
    }

    fn write_slice<'a>(&mut self, op: &Operand) -> Result<&'a mut [f32], ExecError> {
        if op.dtype != DType::F32 {
            return Err(ExecError::backend(NAME, "written operands must be f32"));
        }
        let p = self.ptr(op)?;
        // SAFETY: as in `read_slice`; written operands are pairwise disjoint and disjoint
        // from every read operand.
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut f32, op.numel()) })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        NAME.to_string()
    }

    fn supports(&self, _kernel: &Kernel) -> bool {
        true
    }

    fn alloc(&mut self, bytes: u64) -> Result<BufferId, ExecError> {
        let words = usize::try_from(bytes.div_ceil(8))
            .map_err(|_| ExecError::backend(NAME, format!("cannot allocate {bytes} bytes")))?;
        let mut v = Vec::new();
        v.try_reserve_exact(words)
            .map_err(|e| ExecError::backend(NAME, format!("cannot allocate {bytes} bytes: {e}")))?;
        v.resize(words, 0u64);
        self.buffers.push((v, bytes));
        self.stats.allocated_bytes += bytes;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.allocated_bytes);
        self.stats.allocations += 1;
        Ok(BufferId(self.buffers.len() - 1))
    }

    fn write(&mut self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<(), ExecError> {
        let op = byte_operand(buffer, offset, data.len());
        let p = self.ptr(&op)?;
        // SAFETY: `ptr` checked the destination range; `data` is a separate host slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    fn read(&mut self, buffer: BufferId, offset: u64, out: &mut [u8]) -> Result<(), ExecError> {
        let op = byte_operand(buffer, offset, out.len());
        let p = self.ptr(&op)?;
        // SAFETY: `ptr` checked the source range; `out` is a separate host slice.
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn copy(&mut self, buffer: BufferId, from: u64, to: u64, bytes: u64) -> Result<(), ExecError> {
        let len = usize::try_from(bytes)
            .map_err(|_| ExecError::backend(NAME, format!("cannot copy {bytes} bytes")))?;
        let src = self.ptr(&byte_operand(buffer, from, len))?;
        let dst = self.ptr(&byte_operand(buffer, to, len))?;
        // SAFETY: `ptr` checked both ranges against the buffer; `copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst, len) };
        Ok(())
    }

    fn launch(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        check_disjoint(NAME, kernel, inputs, outputs)?;
        if let Some((k, ins)) = fold_transpose(kernel, inputs) {
            return self.launch(&k, &ins, outputs);
        }
        if self.launch_bytes(kernel, inputs, outputs)? {
            return Ok(());
        }
        let sgd = kernel.writes_first_input();
        let (read, written) = if sgd {
            (&inputs[1..], &inputs[..1])
        } else {
            (inputs, outputs)
        };
        // An input that an output exactly is (an in-place pair) is read from a copy, so no
        // shared and mutable slice ever alias.
        let copies: Vec<Option<Vec<f32>>> = read
            .iter()
            .map(|o| {
                if let Some(view) = &o.view {
                    self.materialize(o, view).map(Some)
                } else if written.iter().any(|w| w == o) {
                    match self.read_slice(o)? {
                        Slice::F32(v) => Ok(Some(v.to_vec())),
                        Slice::Idx(_) => Err(ExecError::backend(NAME, "in-place index operand")),
                    }
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<_, ExecError>>()?;
        let ins = read
            .iter()
            .zip(&copies)
            .map(|(o, c)| match c {
                Some(v) => Ok(Slice::F32(v.as_slice())),
                None => self.read_slice(o),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut outs = written
            .iter()
            .map(|o| self.write_slice(o))
            .collect::<Result<Vec<_>, _>>()?;
        run(kernel, &ins, &mut outs, inputs, outputs).map_err(|error| ExecError::Kernel {
            backend: NAME.to_string(),
            kernel: kernel.name(),
            error: Box::new(error),
        })
    }

    fn synchronize(&mut self) -> Result<(), ExecError> {
        Ok(())
    }

    fn memory(&self) -> AllocStats {
        self.stats
    }
}

impl CpuBackend {
    /// The elements of a view operand, row-major in its shape: the stored tensor read, then
    /// each step of the view applied.
    fn materialize(&mut self, o: &Operand, view: &View) -> Result<Vec<f32>, ExecError> {
        if o.dtype != DType::F32 {
            return Err(ExecError::backend(
                NAME,
                "views of integer tensors are not supported",
            ));
        }
        let mut data = decode_f32(&self.bytes(o)?);
        let mut shape = view.base.clone();
        for step in &view.steps {
            if !step_fits(step, &shape) {
                return Err(ExecError::backend(
                    NAME,
                    format!("view step {step:?} does not fit {shape:?}"),
                ));
            }
            let (next, out): (Vec<usize>, Vec<f32>) = match step {
                ViewStep::Reshape(to) => (to.clone(), data),
                ViewStep::Permute(perm) => {
                    let to: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                    let mut y = vec![0.0; data.len()];
                    shape::transpose(&data, &mut y, &shape, perm);
                    (to, y)
                }
                ViewStep::Expand(to) => {
                    let mut y = vec![0.0; to.iter().product()];
                    aten::expand(&data, &mut y, &shape, to);
                    (to.clone(), y)
                }
                ViewStep::Slice { axis, start, end } => {
                    let mut to = shape.clone();
                    to[*axis] = end - start;
                    let mut y = vec![0.0; to.iter().product()];
                    shape::slice(&data, &mut y, &shape, *axis, *start, *end);
                    (to, y)
                }
            };
            if next.iter().product::<usize>() != out.len() {
                return Err(ExecError::backend(
                    NAME,
                    format!("view step {step:?} of {shape:?} does not fit"),
                ));
            }
            shape = next;
            data = out;
        }
        if data.len() != o.numel() {
            return Err(ExecError::backend(
                NAME,
                format!("a view of {:?} read as {:?}", view.base, o.shape),
            ));
        }
        Ok(data)
    }

    /// The f32 elements of `o` (a view materialised), copied.
    fn f32_of(&mut self, o: &Operand) -> Result<Vec<f32>, ExecError> {
        if let Some(view) = &o.view {
            return self.materialize(o, view);
        }
        Ok(decode_f32(&self.bytes(o)?))
    }

    /// The bytes `o` spans (a view: its stored tensor's), copied.
    fn bytes(&mut self, o: &Operand) -> Result<Vec<u8>, ExecError> {
        let mut v = vec![0u8; o.bytes() as usize];
        self.read(o.buffer, o.offset, &mut v)?;
        Ok(v)
    }

    /// Writes f32 values at `o`.
    fn write_f32(&mut self, o: &Operand, values: &[f32]) -> Result<(), ExecError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        self.write(o.buffer, o.offset, &bytes)
    }

    /// Kernels that write something other than f32 (a byte copy, an i64 counter, pooling
    /// indices), through copies of their operands; `false` for every other kernel.
    fn launch_bytes(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<bool, ExecError> {
        match kernel {
            Kernel::CopyInto => {
                let src = self.bytes(&inputs[1])?;
                self.write(inputs[0].buffer, inputs[0].offset, &src)?;
            }
            Kernel::Reshape if inputs[0].dtype != DType::F32 && inputs[0].view.is_none() => {
                let src = self.bytes(&inputs[0])?;
                self.write(outputs[0].buffer, outputs[0].offset, &src)?;
            }
            Kernel::AddScalar { value } if inputs[0].dtype == DType::I64 => {
                if value.fract() != 0.0 {
                    return Err(ExecError::backend(
                        NAME,
                        format!("{}: adds {value} to an integer tensor", kernel.name()),
                    ));
                }
                let x = self.bytes(&inputs[0])?;
                let y: Vec<u8> = x
                    .chunks_exact(8)
                    .flat_map(|c| {
                        let v = i64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
                        v.wrapping_add(*value as i64).to_ne_bytes()
                    })
                    .collect();
                self.write(outputs[0].buffer, outputs[0].offset, &y)?;
            }
            Kernel::MaxPool2dIndices {
                kernel: k,
                stride,
                padding,
            } => {
                let x = self.f32_of(&inputs[0])?;
                let g =
                    conv::Window::pool(&inputs[0].shape, &outputs[0].shape, *k, *stride, *padding);
                let mut y = vec![0.0f32; outputs[0].numel()];
                let mut idx = vec![0i64; outputs[1].numel()];
                aten::max_pool2d_indices(&x, &mut y, &mut idx, &g);
                let ib: Vec<u8> = idx.iter().flat_map(|v| v.to_ne_bytes()).collect();
                self.write_f32(&outputs[0], &y)?;
                self.write(outputs[1].buffer, outputs[1].offset, &ib)?;
            }
            Kernel::Dropout { p, seed } => {
                let x = self.f32_of(&inputs[0])?;
                let run = self.draws.entry(*seed).or_insert(0);
                let mut keep = vec![0.0f32; x.len()];
                aten::bernoulli(&mut keep, 1.0 - *p, *seed, *run);
                *run += 1;
                let scale = (1.0 / (1.0 - *p)) as f32;
                let y: Vec<f32> = x.iter().zip(&keep).map(|(v, k)| v * k * scale).collect();
                let mask: Vec<u8> = keep.iter().map(|&k| u8::from(k != 0.0)).collect();
                self.write_f32(&outputs[0], &y)?;
                self.write(outputs[1].buffer, outputs[1].offset, &mask)?;
            }
            Kernel::DropoutBackward { scale } => {
                let dy = self.f32_of(&inputs[0])?;
                let mask = self.bytes(&inputs[1])?;
                let dx: Vec<f32> = dy
                    .iter()
                    .zip(&mask)
                    .map(|(g, &m)| if m != 0 { g * scale } else { 0.0 })
                    .collect();
                self.write_f32(&outputs[0], &dx)?;
            }
            Kernel::MaskMul => {
                let x = self.f32_of(&inputs[0])?;
                let mask = self.bytes(&inputs[1])?;
                // `x * mask` as PyTorch computes it: the mask promoted to 1.0 or 0.0 (so a
                // masked negative or infinite value gives -0.0 or NaN, not 0.0).
                let y: Vec<f32> = x
                    .iter()
                    .zip(&mask)
                    .map(|(v, &m)| v * f32::from(u8::from(m != 0)))
                    .collect();
                self.write_f32(&outputs[0], &y)?;
            }
            Kernel::Bernoulli { p, seed } => {
                let run = self.draws.entry(*seed).or_insert(0);
                let mut y = vec![0.0f32; outputs[0].numel()];
                aten::bernoulli(&mut y, *p, *seed, *run);
                *run += 1;
                self.write_f32(&outputs[0], &y)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A product whose right operand is the transpose of a stored matrix (`mm(x, t(w))`, the
/// exporter's linear layer) reads the stored matrix with `transpose_b` rather than
/// materialising the transpose: the kernel and operands to launch instead, if so. The
/// product is the same sum in the same order.
fn fold_transpose(kernel: &Kernel, inputs: &[Operand]) -> Option<(Kernel, Vec<Operand>)> {
    let slot = match kernel {
        Kernel::MatMul { transpose_b: false } => 1,
        Kernel::AddMm { transpose_b: false } => 2,
        _ => return None,
    };
    let view = inputs.get(slot)?.view.as_ref()?;
    if view.base.len() != 2 || view.steps != [ViewStep::Permute(vec![1, 0])] {
        return None;
    }
    let mut ins = inputs.to_vec();
    ins[slot] = Operand::new(
        ins[slot].buffer,
        ins[slot].offset,
        ins[slot].dtype,
        view.base.clone(),
    );
    let k = match kernel {
        Kernel::MatMul { .. } => Kernel::MatMul { transpose_b: true },
        _ => Kernel::AddMm { transpose_b: true },
    };
    Some((k, ins))
}

/// f32 values from their native-endian bytes.
fn decode_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Whether a view step can be applied to a tensor of `shape` (kernels index in bounds).
fn step_fits(step: &ViewStep, shape: &[usize]) -> bool {
    match step {
        ViewStep::Reshape(to) => to.iter().product::<usize>() == shape.iter().product::<usize>(),
        ViewStep::Permute(perm) => {
            let mut seen = vec![false; shape.len()];
            perm.len() == shape.len()
                && perm
                    .iter()
                    .all(|&p| p < shape.len() && !std::mem::replace(&mut seen[p], true))
        }
        ViewStep::Expand(to) => crate::shapes::broadcasts(shape, to),
        ViewStep::Slice { axis, start, end } => {
            *axis < shape.len() && start <= end && *end <= shape[*axis]
        }
    }
}

fn byte_operand(buffer: BufferId, offset: u64, len: usize) -> Operand {
    Operand::new(buffer, offset, DType::U8, vec![len])
}

fn f<'a>(s: &'a Slice<'a>) -> Result<&'a [f32], KernelError> {
    match s {
        Slice::F32(v) => Ok(v),
        Slice::Idx(_) => Err(wrong_dtype("f32 data", "integer indices")),
    }
}

fn idx<'a>(s: &'a Slice) -> Result<&'a Indices<'a>, KernelError> {
    match s {
        Slice::Idx(v) => Ok(v),
        Slice::F32(_) => Err(wrong_dtype("integer indices", "f32")),
    }
}

fn wrong_dtype(expected: &'static str, found: &'static str) -> KernelError {
    KernelError::DType {
        what: "an operand".to_string(),
        expected,
        found,
    }
}

/// The dispatch: one arm per op type, each calling the kernel of the same name.
/// `ops_in`/`ops_out` are the operands (for shapes); `ins`/`outs` their memory.
fn run(
    k: &Kernel,
    ins: &[Slice],
    outs: &mut [&mut [f32]],
    ops_in: &[Operand],
    ops_out: &[Operand],
) -> Result<(), KernelError> {
    use Kernel::*;
    let sh = |i: usize| ops_in[i].shape.as_slice();
    let last = |s: &[usize]| s.last().copied().unwrap_or(1);
    match k {
        MatMul { transpose_b } => {
            let b = sh(1);
            let (kk, n) = if *transpose_b {
                (b[1], b[0])
            } else {
                (b[0], b[1])
            };
            linalg::matmul(f(&ins[0])?, f(&ins[1])?, outs[0], kk, n, *transpose_b)
        }
        MatMulTn => linalg::matmul_tn(f(&ins[0])?, f(&ins[1])?, outs[0], last(sh(0)), last(sh(1))),
        BatchedMatMul {
            transpose_a,
            transpose_b,
        } => {
            let (a, y) = (sh(0), ops_out[0].shape.as_slice());
            let r = a.len();
            let d = linalg::Bmm {
                batch: a[..r - 2].iter().product(),
                m: y[r - 2],
                n: y[r - 1],
                k: if *transpose_a { a[r - 2] } else { a[r - 1] },
                transpose_a: *transpose_a,
                transpose_b: *transpose_b,
            };
            linalg::batched_matmul(f(&ins[0])?, f(&ins[1])?, outs[0], &d)
        }
        BiasAdd { axis } => elementwise::bias_add(f(&ins[0])?, f(&ins[1])?, outs[0], sh(0), *axis),
        BiasAddGrad { axis } => elementwise::bias_add_grad(f(&ins[0])?, outs[0], sh(0), *axis),
        Add => elementwise::add(f(&ins[0])?, f(&ins[1])?, outs[0]),
        Mul => elementwise::mul(f(&ins[0])?, f(&ins[1])?, outs[0]),
        Relu => elementwise::relu(f(&ins[0])?, outs[0]),
        ReluGrad => elementwise::relu_grad(f(&ins[0])?, f(&ins[1])?, outs[0]),
        Gelu => elementwise::gelu(f(&ins[0])?, outs[0]),
        GeluGrad => elementwise::gelu_grad(f(&ins[0])?, f(&ins[1])?, outs[0]),
        Conv2d { stride, padding } => {
            let g = conv::Window::conv(sh(0), sh(1), &ops_out[0].shape, *stride, *padding);
            conv::conv2d(f(&ins[0])?, f(&ins[1])?, outs[0], &g, sh(1)[0])
        }
        Conv2dGradInput { stride, padding } => {
            let g = conv::Window::conv(&ops_out[0].shape, sh(1), sh(0), *stride, *padding);
            conv::conv2d_grad_input(f(&ins[0])?, f(&ins[1])?, outs[0], &g, sh(1)[0])
        }
        Conv2dGradWeight { stride, padding } => {
            let g = conv::Window::conv(sh(0), &ops_out[0].shape, sh(1), *stride, *padding);
            conv::conv2d_grad_weight(f(&ins[0])?, f(&ins[1])?, outs[0], &g, sh(1)[1])
        }
        MaxPool2d {
            kernel,
            stride,
            padding,
        } => {
            let g = conv::Window::pool(sh(0), &ops_out[0].shape, *kernel, *stride, *padding);
            conv::max_pool2d(f(&ins[0])?, outs[0], &g)
        }
        MaxPool2dGrad {
            kernel,
            stride,
            padding,
        } => {
            let g = conv::Window::pool(sh(0), sh(1), *kernel, *stride, *padding);
            conv::max_pool2d_grad(f(&ins[0])?, f(&ins[1])?, outs[0], &g)
        }
        GlobalAvgPool => conv::global_avg_pool(f(&ins[0])?, outs[0], sh(0)[2] * sh(0)[3]),
        GlobalAvgPoolGrad => {
            let s = &ops_out[0].shape;
            conv::global_avg_pool_grad(f(&ins[0])?, outs[0], s[2] * s[3])
        }
        BatchNorm { eps } => {
            let d = bn_dims(sh(0));
            norm::batch_norm(f(&ins[0])?, f(&ins[1])?, f(&ins[2])?, *eps, d, outs)
        }
        BatchNormGrad => norm::batch_norm_grad(five(ins)?, bn_dims(sh(0)), outs),
        LayerNorm { eps } => norm::layer_norm(
            f(&ins[0])?,
            f(&ins[1])?,
            f(&ins[2])?,
            *eps,
            last(sh(0)),
            outs,
        ),
        LayerNormGrad => norm::layer_norm_grad(five(ins)?, last(sh(0)), outs),
        Softmax { scale, causal } => {
            norm::softmax(f(&ins[0])?, outs[0], last(sh(0)), *scale, *causal)
        }
        SoftmaxGrad { scale } => {
            norm::softmax_grad(f(&ins[0])?, f(&ins[1])?, outs[0], last(sh(0)), *scale)
        }
        Embedding => {
            let w = sh(1);
            return shape::embedding(idx(&ins[0])?, f(&ins[1])?, outs[0], w[0], w[1]);
        }
        EmbeddingGrad => {
            let dw = &ops_out[0].shape;
            return shape::embedding_grad(idx(&ins[0])?, f(&ins[1])?, outs[0], dw[0], dw[1]);
        }
        Reshape => shape::reshape(f(&ins[0])?, outs[0]),
        Transpose { perm } => shape::transpose(f(&ins[0])?, outs[0], sh(0), perm),
        Concat { axis } => {
            let xs = ins
                .iter()
                .zip(ops_in)
                .map(|(s, o)| Ok((f(s)?, o.shape.as_slice())))
                .collect::<Result<Vec<_>, KernelError>>()?;
            shape::concat(&xs, outs[0], *axis)
        }
        Slice { axis, start, end } => {
            shape::slice(f(&ins[0])?, outs[0], sh(0), *axis, *start, *end)
        }
        Upsample2x => conv::upsample_nearest2x(f(&ins[0])?, outs[0], sh(0)[2], sh(0)[3]),
        Upsample2xGrad => {
            let s = &ops_out[0].shape;
            conv::upsample_nearest2x_grad(f(&ins[0])?, outs[0], s[2], s[3])
        }
        CrossEntropy => {
            return norm::cross_entropy(f(&ins[0])?, idx(&ins[1])?, outs[0], last(sh(0)))
        }
        CrossEntropyGrad => {
            return norm::cross_entropy_grad(f(&ins[0])?, idx(&ins[1])?, outs[0], last(sh(0)))
        }
        SgdUpdate { lr } => elementwise::sgd_update(outs[0], f(&ins[0])?, *lr),
        ConvBackward {
            stride,
            padding,
            groups,
            mask,
        } => {
            let (x, w) = (sh(1), sh(2));
            let g = conv::Window::conv(x, w, sh(0), *stride, *padding);
            let (dy, xv, wv) = (f(&ins[0])?, f(&ins[1])?, f(&ins[2])?);
            aten::conv_backward(dy, xv, wv, outs, *mask, &g, w[0], *groups)
        }
        ConvGrouped {
            stride,
            padding,
            groups,
            bias,
        } => {
            let (x, w) = (sh(0), sh(1));
            let g = conv::Window::conv(x, w, &ops_out[0].shape, *stride, *padding);
            let b = if *bias { Some(f(&ins[2])?) } else { None };
            aten::conv_grouped(f(&ins[0])?, f(&ins[1])?, b, outs[0], &g, w[0], *groups)
        }
        BatchNormBackward { mask } => {
            aten::batch_norm_backward(five(ins)?, bn_dims(sh(1)), *mask, outs)
        }
        BatchNormUpdateStats {
            momentum,
            eps,
            count,
        } => {
            let four = [f(&ins[0])?, f(&ins[1])?, f(&ins[2])?, f(&ins[3])?];
            aten::batch_norm_update_stats(four, *momentum, *eps, *count, outs)
        }
        AddScalar { value } => aten::add_scalar(f(&ins[0])?, outs[0], *value as f32),
        MulScalar { value } => aten::mul_scalar(f(&ins[0])?, outs[0], *value),
        DivScalar { value } => aten::div_scalar(f(&ins[0])?, outs[0], *value),
        ThresholdBackward { threshold } => {
            aten::threshold_backward(f(&ins[0])?, f(&ins[1])?, outs[0], *threshold)
        }
        MaxPool2dIndicesBackward {
            kernel,
            stride,
            padding,
        } => {
            let g = conv::Window::pool(sh(1), sh(0), *kernel, *stride, *padding);
            return aten::max_pool2d_indices_backward(f(&ins[0])?, idx(&ins[2])?, outs[0], &g);
        }
        AvgPool2d {
            kernel,
            stride,
            padding,
        } => {
            let g = conv::Window::pool(sh(0), &ops_out[0].shape, *kernel, *stride, *padding);
            aten::avg_pool2d(f(&ins[0])?, outs[0], &g)
        }
        AvgPool2dBackward {
            kernel,
            stride,
            padding,
        } => {
            let g = conv::Window::pool(sh(1), sh(0), *kernel, *stride, *padding);
            aten::avg_pool2d_backward(f(&ins[0])?, outs[0], &g)
        }
        Reduce { start, end, mean } => {
            let x = sh(0);
            let red = x[*start..*end].iter().product();
            let inner = x[*end..].iter().product();
            aten::reduce(f(&ins[0])?, outs[0], red, inner, *mean)
        }
        Expand => aten::expand(f(&ins[0])?, outs[0], sh(0), &ops_out[0].shape),
        Fill { value } => outs[0].fill(*value),
        AddMm { transpose_b } => {
            let b = sh(2);
            let (k, n) = if *transpose_b {
                (b[1], b[0])
            } else {
                (b[0], b[1])
            };
            aten::addmm(
                f(&ins[0])?,
                f(&ins[1])?,
                f(&ins[2])?,
                outs[0],
                k,
                n,
                *transpose_b,
            )
        }
        LogSoftmax => aten::log_softmax(f(&ins[0])?, outs[0], last(sh(0))),
        LogSoftmaxBackward => {
            aten::log_softmax_backward(f(&ins[0])?, f(&ins[1])?, outs[0], last(sh(0)))
        }
        NllLoss { ignore_index } => {
            return aten::nll_loss(f(&ins[0])?, idx(&ins[1])?, outs, last(sh(0)), *ignore_index)
        }
        NllLossBackward { ignore_index } => {
            let (dl, t, tw) = (f(&ins[0])?, idx(&ins[2])?, f(&ins[3])?);
            return aten::nll_loss_backward(dl, t, tw, outs[0], last(sh(1)), *ignore_index);
        }
        Pointwise(u) => {
            for (y, &x) in outs[0].iter_mut().zip(f(&ins[0])?) {
                *y = u.apply(x);
            }
        }
        PointwiseBackward(u) => {
            let (dy, v) = (f(&ins[0])?, f(&ins[1])?);
            for ((d, &g), &v) in outs[0].iter_mut().zip(dy).zip(v) {
                *d = u.grad(g, v);
            }
        }
        EmbeddingRows => {
            let w = sh(0);
            return shape::embedding(idx(&ins[1])?, f(&ins[0])?, outs[0], w[0], w[1]);
        }
        EmbeddingDenseBackward { padding_idx } => {
            let dw = &ops_out[0].shape;
            shape::embedding_grad(idx(&ins[1])?, f(&ins[0])?, outs[0], dw[0], dw[1])?;
            if let Some(p) = padding_idx {
                outs[0][p * dw[1]..(p + 1) * dw[1]].fill(0.0);
            }
        }
        LayerNormBackward { mask } => {
            let ins6 = [
                f(&ins[0])?,
                f(&ins[1])?,
                f(&ins[2])?,
                f(&ins[3])?,
                f(&ins[4])?,
            ];
            aten::layer_norm_backward(ins6, last(sh(1)), *mask, outs)
        }
        SoftmaxBackward => norm::softmax_grad(f(&ins[1])?, f(&ins[0])?, outs[0], last(sh(0)), 1.0),
        Split { axis, size } => {
            let x = sh(0);
            for (i, out) in outs.iter_mut().enumerate() {
                let start = i * size;
                let end = (start + size).min(x[*axis]);
                shape::slice(f(&ins[0])?, out, x, *axis, start, end);
            }
        }
        Broadcast { op } => {
            let y = &ops_out[0].shape;
            let n = outs[0].len();
            let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
            aten::expand(f(&ins[0])?, &mut a, sh(0), y);
            aten::expand(f(&ins[1])?, &mut b, sh(1), y);
            let op = |(a, b): (&f32, &f32)| match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
            };
            for (o, v) in outs[0].iter_mut().zip(a.iter().zip(&b).map(op)) {
                *o = v;
            }
        }
        Zeros { .. } => outs[0].fill(0.0),
        Assign => aten::expand(f(&ins[1])?, outs[0], sh(1), &ops_out[0].shape),
        Unbind { axis } => {
            let x = sh(0);
            for (i, out) in outs.iter_mut().enumerate() {
                shape::slice(f(&ins[0])?, out, x, *axis, i, i + 1);
            }
        }
        Stack { axis } => {
            let shapes: Vec<Vec<usize>> = ops_in
                .iter()
                .map(|o| {
                    let mut s = o.shape.clone();
                    s.insert(*axis, 1);
                    s
                })
                .collect();
            let xs = ins
                .iter()
                .zip(&shapes)
                .map(|(s, sh)| Ok((f(s)?, sh.as_slice())))
                .collect::<Result<Vec<_>, KernelError>>()?;
            shape::concat(&xs, outs[0], *axis)
        }
        CopyInto
        | MaxPool2dIndices { .. }
        | Bernoulli { .. }
        | Dropout { .. }
        | DropoutBackward { .. }
        | MaskMul => {
            return Err(KernelError::Operands(
                "runs through the byte path of `launch`".to_string(),
            ))
        }
    }
    Ok(())
}

fn five<'a>(ins: &'a [Slice]) -> Result<[&'a [f32]; 5], KernelError> {
    Ok([
        f(&ins[0])?,
        f(&ins[1])?,
        f(&ins[2])?,
        f(&ins[3])?,
        f(&ins[4])?,
    ])
}

fn bn_dims(x: &[usize]) -> norm::NormDims {
    norm::NormDims {
        outer: x[0],
        feat: x[1],
        inner: x[2..].iter().product(),
    }
}
