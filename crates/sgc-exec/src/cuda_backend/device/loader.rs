//! Before any cudarc call: are the driver, NVRTC and cuBLAS loadable? Then the program's
//! compile to a CUBIN for the device.
//!
//! cudarc's dynamic loading panics when a library is missing, at the first call into it.
//! [`check_libraries`] asks cudarc's own `is_culib_present` (which tries the same library
//! names as the loader, and returns a bool) for each library first, and turns a missing one
//! into [`ExecError::CudaUnavailable`] saying what to install.
//!
//! The kernels are compiled for the device's real architecture (`sm_XY`) and loaded as a
//! CUBIN: no PTX JIT at load time, so an NVRTC newer than the driver works too.

use super::sources;
use crate::error::{ExecError, KernelError};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

fn unavailable(msg: impl Into<String>) -> ExecError {
    ExecError::CudaUnavailable(msg.into())
}

/// Errors when the driver, NVRTC or cuBLAS cannot be loaded.
pub(crate) fn check_libraries() -> Result<(), ExecError> {
    // SAFETY: each call only tries `dlopen` on the candidate names and closes the library.
    let (driver, nvrtc, cublas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !driver {
        return Err(unavailable(
            "CUDA driver not found (libcuda.so.1 could not be loaded): \
             this machine has no NVIDIA driver, or it is not on the loader path",
        ));
    }
    if !nvrtc {
        return Err(unavailable(
            "NVRTC not found (libnvrtc.so.12): install the CUDA toolkit, or \
             `pip install nvidia-cuda-nvrtc-cu12` and add its nvidia/cuda_nvrtc/lib directory to LD_LIBRARY_PATH",
        ));
    }
    if !cublas {
        return Err(unavailable(
            "cuBLAS not found (libcublas.so.12): install the CUDA toolkit, or \
             `pip install nvidia-cublas-cu12` and add its nvidia/cublas/lib directory to LD_LIBRARY_PATH",
        ));
    }
    Ok(())
}

/// Compiled images by `(major, minor)` architecture.
type Cubins = HashMap<(i32, i32), Vec<u8>>;

/// The CUBIN of [`sources::program`] for `sm_<major><minor>`, compiled once per process
/// and architecture (a compile takes seconds; every backend of the process reuses it).
pub(crate) fn cubin(major: i32, minor: i32) -> Result<Vec<u8>, ExecError> {
    static CACHE: OnceLock<Mutex<Cubins>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let cached = cache
        .lock()
        .ok()
        .and_then(|c| c.get(&(major, minor)).cloned());
    if let Some(image) = cached {
        return Ok(image);
    }
    let image = compile_cubin(major, minor)?;
    if let Ok(mut c) = cache.lock() {
        c.insert((major, minor), image.clone());
    }
    Ok(image)
}

/// Compiles [`sources::program`] for `sm_<major><minor>` and returns the CUBIN.
fn compile_cubin(major: i32, minor: i32) -> Result<Vec<u8>, ExecError> {
    let arch = format!("sm_{major}{minor}");
    let fail = |what: &str, e: nvrtc::NvrtcError| {
        unavailable(format!("NVRTC {what} for {arch} failed: {e}"))
    };
    let src = CString::new(sources::program())
        .map_err(|_| unavailable("the kernel source contains a NUL byte"))?;
    let name = CString::new("sgc_kernels.cu").expect("no NUL in a literal");
    let prog = nvrtc::create_program(&src, Some(&name)).map_err(|e| fail("create", e))?;
    // SAFETY: `prog` is a live program until `destroy_program` below.
    let out = unsafe { compile_and_read(prog, &sources::nvrtc_options(&arch)) };
    // SAFETY: destroyed once, after its last use.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out.map_err(|e| unavailable(format!("compiling the CUDA kernels for {arch}: {e}")))
}

/// Compiles `prog` with `options` and reads its CUBIN; a failed compile returns the log.
///
/// # Safety
/// `prog` must be a live NVRTC program.
unsafe fn compile_and_read(
    prog: nvrtc_sys::nvrtcProgram,
    options: &[String],
) -> Result<Vec<u8>, KernelError> {
    if let Err(e) = unsafe { nvrtc::compile_program(prog, options) } {
        let log = unsafe { nvrtc::get_program_log(prog) }.unwrap_or_default();
        let log: Vec<u8> = log
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let log = String::from_utf8_lossy(&log);
        return Err(KernelError::device("NVRTC compile", format!("{e}\n{log}")));
    }
    let mut size = 0usize;
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| KernelError::device("nvrtcGetCUBINSize", e))?;
    let mut cubin = vec![0u8; size];
    unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char) }
        .result()
        .map_err(|e| KernelError::device("nvrtcGetCUBIN", e))?;
    Ok(cubin)
}
