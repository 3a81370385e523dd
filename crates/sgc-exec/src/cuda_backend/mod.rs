//! The CUDA backend, under the CPU backend's kernel names.
//!
//! Design (to be written against [`crate::Backend`] behind the `cuda` feature): cudarc
//! with dynamic loading, kernels in CUDA C compiled at run time with NVRTC, matmul
//! through cuBLAS, one device arena carved by offsets. Until it lands, and in every build
//! without the `cuda` feature, `CudaBackend` is a stand-in with the same name whose
//! constructor returns a clear error, so that every caller builds everywhere.

mod stand_in;
pub use stand_in::{CudaBackend, NOT_BUILT};
