//! The CPU reference backend: kernels in plain Rust, each written once over f32 and f64
//! ([`Real`]), matmul through `matrixmultiply` (f64 sums), convolution through im2col and
//! the same products; f16 and bf16 operands are widened to f32 around each kernel and
//! rounded back (`widen`). A kernel with an f64 operand runs in f64, its f32 operands
//! widened exactly (as PyTorch promotes); its float outputs are f64.
//!
//! Buffers are 8-byte aligned host allocations. [`Backend::launch`] checks every operand
//! (inside its buffer, aligned for its dtype, written operands overlapping nothing), then
//! hands the kernel plain slices. Each op family ([`crate::ops`]) has a module of its
//! name here, with its `run` and one function per op type; the CUDA backend has the same
//! modules and names. Every reduction runs in a fixed order (the GEMM splits its output among threads,
//! never a sum), so a recomputed tensor is bitwise identical to the first computation
//! whatever the thread count. Reductions over the batch (bias gradients, pooling means,
//! norm statistics, losses) accumulate in f64. Views of exported graphs are materialised
//! on read.

mod attention;
mod conv;
mod elementwise;
mod embedding;
mod linalg;
mod loss;
mod math;
mod norm;
mod pool;
mod random;
mod reduce;
mod shape;
mod widen;

pub(crate) use crate::widening::is_half;

use crate::backend::{AllocStats, Backend, BufferId, HostCopy, Operand, View, ViewStep};
use crate::error::{ExecError, KernelError};
use crate::kernel::{FamilyKernel, Kernel};
use crate::real::Real;
use sgc_ir::DType;

/// What a kernel returns: `Ok`, or the error naming what its operands got wrong.
pub(crate) type R = Result<(), KernelError>;

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

/// A read operand copied out of its buffer (a materialised view, an in-place input).
pub(crate) enum Owned {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

/// An operand resolved to host memory.
pub(crate) enum Slice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    Idx(Indices<'a>),
}

/// A float type the CPU backend's kernels run in ([`Real`]), with how its operands are
/// read and written.
pub(crate) trait Host: Real {
    /// The elements of `s`, if it holds this type.
    fn of_slice<'a>(s: &Slice<'a>) -> Option<&'a [Self]>;

    /// The elements of `o` (a view materialised), copied.
    fn read(be: &mut CpuBackend, o: &Operand) -> Result<Vec<Self>, ExecError>;

    /// Native-endian bytes of `v`.
    fn bytes_of(v: &[Self]) -> Vec<u8>;

    /// `v` as a read operand's copy.
    fn owned(v: Vec<Self>) -> Owned;
}

impl Host for f32 {
    fn of_slice<'a>(s: &Slice<'a>) -> Option<&'a [Self]> {
        match s {
            Slice::F32(v) => Some(v),
            _ => None,
        }
    }

    fn read(be: &mut CpuBackend, o: &Operand) -> Result<Vec<Self>, ExecError> {
        be.f32_of(o)
    }

    fn bytes_of(v: &[Self]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn owned(v: Vec<Self>) -> Owned {
        Owned::F32(v)
    }
}

impl Host for f64 {
    fn of_slice<'a>(s: &Slice<'a>) -> Option<&'a [Self]> {
        match s {
            Slice::F64(v) => Some(v),
            _ => None,
        }
    }

    /// An f32 operand promoted (widened exactly).
    fn read(be: &mut CpuBackend, o: &Operand) -> Result<Vec<Self>, ExecError> {
        match o.dtype {
            DType::F32 => Ok(be.f32_of(o)?.into_iter().map(f64::from).collect()),
            _ => be.f64_of(o),
        }
    }

    fn bytes_of(v: &[Self]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn owned(v: Vec<Self>) -> Owned {
        Owned::F64(v)
    }
}

/// The CPU device: host buffers and allocation counters.
#[derive(Default)]
pub struct CpuBackend {
    buffers: Vec<(Vec<u64>, u64)>,
    stats: AllocStats,
    /// Runs so far of each random op (by its seed): the stream position of its next draw.
    draws: std::collections::HashMap<u64, u64>,
    /// Where offloaded storages go ([`Backend::alloc_host_pool`]).
    host_pool: Vec<u8>,
    /// How matrix products (and the convolutions and attention over them) sum.
    products: Products,
}

/// How the CPU backend's matrix products sum their `k` terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// In f64, each result rounded to f32 once (the default: the reference, within half an
    /// ulp of the float64 product).
    #[default]
    Exact,
    /// In f32, as cuBLAS's SGEMM (and the CUDA backend) sums: to compare another f32
    /// device with the CPU backend on graphs so ill-conditioned that the two summations'
    /// rounding alone moves a gradient (batch norm over two values, at batch 2 and 1x1
    /// spatial, makes its input gradient zero analytically and rounding noise in practice).
    F32,
}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// A CPU backend whose matrix products sum as `products` says.
    pub fn with_products(products: Products) -> Self {
        CpuBackend {
            products,
            ..Self::default()
        }
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
                DType::F64 => Slice::F64(std::slice::from_raw_parts(p as *const f64, n)),
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

    fn write_slice<'a, T: Host>(&mut self, op: &Operand) -> Result<&'a mut [T], ExecError> {
        if op.dtype != T::DTYPE {
            return Err(ExecError::backend(
                NAME,
                format!(
                    "a kernel computing in {} writes a {} operand (every float operand of a kernel with an f64 operand must be f64)",
                    T::DTYPE.as_str(),
                    op.dtype.as_str()
                ),
            ));
        }
        let p = self.ptr(op)?;
        // SAFETY: as in `read_slice`; written operands are pairwise disjoint and disjoint
        // from every read operand; `range` checked the alignment for `T`'s dtype.
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut T, op.numel()) })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        NAME.to_string()
    }

    fn supports(&self, _kernel: &Kernel) -> bool {
        true
    }

    /// Also f16 and bf16 (widened to f32 around each kernel: `crate::widening`), and f64.
    fn holds(&self, dtype: DType) -> bool {
        crate::backend::BASE_DTYPES.contains(&dtype) || is_half(dtype) || dtype == DType::F64
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

    fn run_kernel(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        if crate::widening::run_widened(self, kernel, inputs, outputs)?
            || self.launch_bytes(kernel, inputs, outputs)?
        {
            return Ok(());
        }
        if inputs.iter().chain(outputs).any(|o| o.dtype == DType::F64) {
            self.launch::<f64>(kernel, inputs, outputs)
        } else {
            self.launch::<f32>(kernel, inputs, outputs)
        }
    }

    fn synchronize(&mut self) -> Result<(), ExecError> {
        Ok(())
    }

    type Mark = std::time::Instant;

    fn mark(&mut self) -> Result<Self::Mark, ExecError> {
        Ok(std::time::Instant::now())
    }

    fn seconds_between(&mut self, from: &Self::Mark, to: &Self::Mark) -> Result<f64, ExecError> {
        Ok(to.saturating_duration_since(*from).as_secs_f64())
    }

    fn memory(&self) -> AllocStats {
        self.stats
    }

    /// Copies run as they are queued, so there is nothing to wait for.
    type CopyDone = ();

    fn alloc_host_pool(&mut self, bytes: u64) -> Result<(), ExecError> {
        if !self.host_pool.is_empty() {
            return Err(ExecError::backend(NAME, "the host pool is made once"));
        }
        let len = usize::try_from(bytes)
            .map_err(|_| ExecError::backend(NAME, format!("cannot allocate {bytes} host bytes")))?;
        let mut pool = Vec::new();
        pool.try_reserve_exact(len).map_err(|e| {
            ExecError::backend(NAME, format!("cannot allocate {bytes} host bytes: {e}"))
        })?;
        pool.resize(len, 0u8);
        self.host_pool = pool;
        Ok(())
    }

    fn host_pool_bytes(&self) -> u64 {
        self.host_pool.len() as u64
    }

    fn offload(&mut self, copy: &HostCopy) -> Result<(), ExecError> {
        let range = self.host_range(copy)?;
        let mut pool = std::mem::take(&mut self.host_pool);
        let done = self.read(copy.buffer, copy.offset, &mut pool[range]);
        self.host_pool = pool;
        done
    }

    fn fetch(&mut self, copy: &HostCopy) -> Result<(), ExecError> {
        let range = self.host_range(copy)?;
        let pool = std::mem::take(&mut self.host_pool);
        let done = self.write(copy.buffer, copy.offset, &pool[range]);
        self.host_pool = pool;
        done
    }

    fn wait_copy(&mut self, _done: &()) -> Result<(), ExecError> {
        Ok(())
    }
}

impl CpuBackend {
    /// Runs `kernel` on plain slices, computing in `T`.
    fn launch<T: Host>(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<(), ExecError> {
        let sgd = kernel.writes_first_input();
        let (read, written) = if sgd {
            (&inputs[1..], &inputs[..1])
        } else {
            (inputs, outputs)
        };
        // An input that an output exactly is (an in-place pair) is read from a copy, so no
        // shared and mutable slice ever alias.
        let copies: Vec<Option<Owned>> = read
            .iter()
            .map(|o| {
                if T::DTYPE == DType::F64 && o.dtype == DType::F32 {
                    // An f32 operand of an f64 op, promoted by `Host::read`.
                    Ok(Some(T::owned(T::read(self, o)?)))
                } else if let Some(view) = &o.view {
                    self.owned_view(o, view).map(Some)
                } else if written.iter().any(|w| w == o) {
                    match self.read_slice(o)? {
                        Slice::F32(v) => Ok(Some(Owned::F32(v.to_vec()))),
                        Slice::F64(v) => Ok(Some(Owned::F64(v.to_vec()))),
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
                Some(Owned::F32(v)) => Ok(Slice::F32(v.as_slice())),
                Some(Owned::F64(v)) => Ok(Slice::F64(v.as_slice())),
                Some(Owned::I64(v)) => Ok(Slice::Idx(Indices::I64(v.as_slice()))),
                None => self.read_slice(o),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut outs = written
            .iter()
            .map(|o| self.write_slice::<T>(o))
            .collect::<Result<Vec<_>, _>>()?;
        let io = Io {
            ins: &ins,
            outs: &mut outs,
            ops_in: inputs,
            ops_out: outputs,
        };
        linalg::summing(self.products, || run(kernel, io)).map_err(|error| ExecError::Kernel {
            backend: NAME.to_string(),
            kernel: kernel.name(),
            error: Box::new(error),
        })
    }

    /// A view operand's elements, materialised: i64 and f64 as such, anything else as f32
    /// words.
    fn owned_view(&mut self, o: &Operand, view: &View) -> Result<Owned, ExecError> {
        Ok(match o.dtype {
            DType::I64 => Owned::I64(self.i64_of(o)?),
            DType::F64 => Owned::F64(self.f64_of(o)?),
            _ => Owned::F32(self.materialize(o, view)?),
        })
    }
}

impl CpuBackend {
    /// The host pool's bytes of `copy`, checked to lie inside the pool.
    fn host_range(&self, copy: &HostCopy) -> Result<std::ops::Range<usize>, ExecError> {
        let end = copy.host_offset.checked_add(copy.bytes);
        match end.filter(|&e| e <= self.host_pool.len() as u64) {
            Some(end) => Ok(copy.host_offset as usize..end as usize),
            None => Err(ExecError::backend(
                NAME,
                format!(
                    "host bytes {}..+{} are outside the host pool ({} bytes)",
                    copy.host_offset,
                    copy.bytes,
                    self.host_pool.len()
                ),
            )),
        }
    }
}

impl CpuBackend {
    /// The elements of a view operand, row-major in its shape: the stored tensor read, then
    /// each step of the view applied (an i64 tensor: as pairs of f32 words,
    /// [`View::widened`]).
    fn materialize(&mut self, o: &Operand, view: &View) -> Result<Vec<f32>, ExecError> {
        let words = match o.dtype {
            DType::F32 | DType::I32 | DType::Bool | DType::U8 => 1,
            DType::I64 | DType::F64 => 2,
            _ => {
                return Err(ExecError::backend(
                    NAME,
                    format!("views of {} tensors are not supported", o.dtype.as_str()),
                ))
            }
        };
        let wide;
        let view = if words == 1 {
            view
        } else {
            wide = view.widened(words);
            &wide
        };
        // Elements as 4-byte words whose bits are moved, never computed on: an i64 as two,
        // a bool or u8 byte as the low bits of one.
        let mut data = match o.dtype {
            DType::Bool | DType::U8 => self
                .bytes(o)?
                .into_iter()
                .map(|b| f32::from_bits(u32::from(b)))
                .collect(),
            _ => decode_f32(&self.bytes(o)?),
        };
        let mut shape = view.base.clone();
        for step in &view.steps {
            if !step.fits(&shape) {
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
                    shape::expand(&data, &mut y, &shape, to);
                    (to.clone(), y)
                }
                ViewStep::Slice {
                    axis,
                    start,
                    end,
                    step: by,
                } => {
                    let to = step.sliced(&shape);
                    let mut y = vec![0.0; to.iter().product()];
                    shape::slice(&data, &mut y, &shape, *axis, (*start, *end, *by));
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
        if data.len() != o.numel() * words {
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

    /// The bytes of `o`'s elements, row-major in its shape (a view materialised; else its
    /// stored bytes).
    fn byte_elements(&mut self, o: &Operand) -> Result<Vec<u8>, ExecError> {
        let Some(view) = &o.view else {
            return self.bytes(o);
        };
        let words = self.materialize(o, view)?;
        Ok(match o.dtype.size() {
            1 => words.into_iter().map(|w| w.to_bits() as u8).collect(),
            // f32, i32 (bits moved as f32 words), i64 and f64 (two words each).
            4 | 8 => words.into_iter().flat_map(f32::to_ne_bytes).collect(),
            _ => {
                return Err(ExecError::backend(
                    NAME,
                    format!("a view of a {} tensor read as bytes", o.dtype.as_str()),
                ))
            }
        })
    }

    /// The i64 elements of `o` (a view materialised), copied.
    fn i64_of(&mut self, o: &Operand) -> Result<Vec<i64>, ExecError> {
        let bytes: Vec<u8> = match &o.view {
            Some(view) => {
                let words = self.materialize(o, view)?;
                words.iter().flat_map(|w| w.to_ne_bytes()).collect()
            }
            None => self.bytes(o)?,
        };
        let word = |c: &[u8]| i64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
        Ok(bytes.chunks_exact(8).map(word).collect())
    }

    /// The f64 elements of `o` (a view materialised), copied.
    fn f64_of(&mut self, o: &Operand) -> Result<Vec<f64>, ExecError> {
        Ok(self
            .i64_of(o)?
            .into_iter()
            .map(|v| f64::from_bits(v as u64))
            .collect())
    }

    /// Writes float values at `o`.
    fn write_floats<T: Host>(&mut self, o: &Operand, values: &[T]) -> Result<(), ExecError> {
        self.write(o.buffer, o.offset, &T::bytes_of(values))
    }

    /// Writes i64 values at `o`.
    fn write_i64(&mut self, o: &Operand, values: &[i64]) -> Result<(), ExecError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        self.write(o.buffer, o.offset, &bytes)
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
    /// indices, masks), through copies of their operands; `false` for every other kernel.
    fn launch_bytes(
        &mut self,
        kernel: &Kernel,
        inputs: &[Operand],
        outputs: &[Operand],
    ) -> Result<bool, ExecError> {
        match kernel.op() {
            FamilyKernel::Shape(k) => shape::launch_bytes(self, k, inputs, outputs),
            FamilyKernel::Elementwise(k) => elementwise::launch_bytes(self, k, inputs, outputs),
            FamilyKernel::Pool(k) => pool::launch_bytes(self, k, inputs, outputs),
            FamilyKernel::Random(k) => random::launch(self, k, inputs, outputs).map(|()| true),
            _ => Ok(false),
        }
    }
}

/// f32 values from their native-endian bytes.
fn decode_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn byte_operand(buffer: BufferId, offset: u64, len: usize) -> Operand {
    Operand::new(buffer, offset, DType::U8, vec![len])
}

/// The float elements of `s`, of the type the kernel computes in.
fn f<'a, T: Host>(s: &'a Slice<'a>) -> Result<&'a [T], KernelError> {
    T::of_slice(s).ok_or_else(|| wrong_dtype(T::DTYPE.as_str(), found(s)))
}

fn idx<'a>(s: &'a Slice) -> Result<&'a Indices<'a>, KernelError> {
    match s {
        Slice::Idx(v) => Ok(v),
        _ => Err(wrong_dtype("integer indices", found(s))),
    }
}

fn found(s: &Slice) -> &'static str {
    match s {
        Slice::F32(_) => "f32",
        Slice::F64(_) => "f64",
        Slice::Idx(_) => "integer indices",
    }
}

fn wrong_dtype(expected: &'static str, found: &'static str) -> KernelError {
    KernelError::DType {
        what: "an operand".to_string(),
        expected,
        found,
    }
}

/// One launch's operands: their memory (`ins`, `outs`) and the operands themselves (for
/// shapes).
pub(crate) struct Io<'s, 'a, T> {
    ins: &'s [Slice<'a>],
    outs: &'s mut [&'a mut [T]],
    ops_in: &'s [Operand],
    ops_out: &'s [Operand],
}

/// The dispatch: each family's kernels run in the module of the family's name.
fn run<T: Host>(k: &Kernel, io: Io<T>) -> R {
    match k.op() {
        FamilyKernel::Linalg(k) => linalg::run(k, io),
        FamilyKernel::Elementwise(k) => elementwise::run(k, io),
        FamilyKernel::Math(k) => math::run(k, io),
        FamilyKernel::Conv(k) => conv::run(k, io),
        FamilyKernel::Pool(k) => pool::run(k, io),
        FamilyKernel::Norm(k) => norm::run(k, io),
        FamilyKernel::Loss(k) => loss::run(k, io),
        FamilyKernel::Embedding(k) => embedding::run(k, io),
        FamilyKernel::Shape(k) => shape::run(k, io),
        FamilyKernel::Reduce(k) => reduce::run(k, io),
        FamilyKernel::Attention(k) => attention::run(k, io),
        FamilyKernel::Random(_) => Err(byte_path()),
    }
}

/// The error of a kernel that runs through the byte path of `launch` only.
fn byte_path() -> KernelError {
    KernelError::Operands("runs through the byte path of `launch`".to_string())
}

/// The last axis of `s` (1 for a scalar).
fn last(s: &[usize]) -> usize {
    s.last().copied().unwrap_or(1)
}

/// The elements of the last `axes` axes of `s` (a row of a norm over them).
fn trailing(s: &[usize], axes: usize) -> usize {
    s[s.len().saturating_sub(axes)..].iter().product()
}
