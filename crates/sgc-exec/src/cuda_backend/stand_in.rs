//! `CudaBackend` in a build without the `cuda` feature: it cannot be constructed.

use crate::backend::{AllocStats, Backend, BufferId, HostCopy, Operand};
use crate::error::ExecError;
use crate::kernel::Kernel;

/// The message every CUDA request gets in this build.
pub const NOT_BUILT: &str = "sgc was built without CUDA support (build with --features cuda)";

/// Uninhabited: no value exists, so every method is unreachable by construction.
pub enum CudaBackend {}

impl CudaBackend {
    /// Always an error in this build.
    pub fn new(_ordinal: usize) -> Result<Self, ExecError> {
        Err(ExecError::CudaUnavailable(NOT_BUILT.to_string()))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        match *self {}
    }
    fn supports(&self, _kernel: &Kernel) -> bool {
        match *self {}
    }
    fn alloc(&mut self, _bytes: u64) -> Result<BufferId, ExecError> {
        match *self {}
    }
    fn write(&mut self, _b: BufferId, _offset: u64, _data: &[u8]) -> Result<(), ExecError> {
        match *self {}
    }
    fn read(&mut self, _b: BufferId, _offset: u64, _out: &mut [u8]) -> Result<(), ExecError> {
        match *self {}
    }
    fn run_kernel(&mut self, _k: &Kernel, _i: &[Operand], _o: &[Operand]) -> Result<(), ExecError> {
        match *self {}
    }
    fn synchronize(&mut self) -> Result<(), ExecError> {
        match *self {}
    }
    type Mark = ();
    fn mark(&mut self) -> Result<(), ExecError> {
        match *self {}
    }
    fn seconds_between(&mut self, _from: &(), _to: &()) -> Result<f64, ExecError> {
        match *self {}
    }
    fn memory(&self) -> AllocStats {
        match *self {}
    }
    type CopyDone = ();
    fn alloc_host_pool(&mut self, _bytes: u64) -> Result<(), ExecError> {
        match *self {}
    }
    fn host_pool_bytes(&self) -> u64 {
        match *self {}
    }
    fn offload(&mut self, _copy: &HostCopy) -> Result<(), ExecError> {
        match *self {}
    }
    fn fetch(&mut self, _copy: &HostCopy) -> Result<(), ExecError> {
        match *self {}
    }
    fn wait_copy(&mut self, _done: &()) -> Result<(), ExecError> {
        match *self {}
    }
}
