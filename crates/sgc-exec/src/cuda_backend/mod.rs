//! The CUDA backend. Without the `cuda` feature this is a stand-in with the same name
//! whose constructor returns a clear error, so that every caller builds everywhere.
//!
//! With the feature (to be written against [`crate::Backend`]): cudarc with dynamic
//! loading, kernels in CUDA C compiled at run time with NVRTC, matmul through cuBLAS, one
//! device arena carved by offsets, one kernel per op type under the CPU backend's names.

#[cfg(not(feature = "cuda"))]
mod stand_in;
#[cfg(not(feature = "cuda"))]
pub use stand_in::CudaBackend;
