//! The CUDA C source of every kernel, the NVRTC options, and each kernel's parameter list.
//!
//! Compiled into every build (it is only text), so that the kernel-compile test
//! (`tests/cuda_kernels.rs`) compiles exactly what the backend compiles, without the
//! `cuda` feature and without a GPU. The backend compiles [`program`] once, at creation,
//! into one module. [`signatures`], parsed from the sources' `extern "C" __global__`
//! declarations, is the ABI the Rust side launches with: the backend refuses a launch
//! whose arguments do not match it.

/// The shared prelude: typedefs, loop macros, the fixed-order block reductions.
pub const PRELUDE: &str = include_str!("kernels/prelude.cuh");

/// The kernel files, `(file name, source)`: one per op family with CUDA kernels, named
/// after the family (`ops/<family>.rs`, `cpu_backend/<family>.rs`).
pub const FILES: &[(&str, &str)] = &[
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("math.cu", include_str!("kernels/math.cu")),
    ("conv.cu", include_str!("kernels/conv.cu")),
    ("pool.cu", include_str!("kernels/pool.cu")),
    ("norm.cu", include_str!("kernels/norm.cu")),
    ("loss.cu", include_str!("kernels/loss.cu")),
    ("embedding.cu", include_str!("kernels/embedding.cu")),
    ("shape.cu", include_str!("kernels/shape.cu")),
    ("reduce.cu", include_str!("kernels/reduce.cu")),
    ("random.cu", include_str!("kernels/random.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
];

/// Threads per block of every launch; the reductions' shared-memory trees assume it
/// (`BLOCK` in the prelude).
pub const BLOCK: u32 = 256;

/// Axes a `transpose` handles (`MAX_RANK` in the prelude).
pub const MAX_RANK: usize = 8;

/// The whole program: the prelude, then every file, each after a `#line` directive so that
/// compiler messages name the file and line.
pub fn program() -> String {
    let mut s = String::from("#line 1 \"prelude.cuh\"\n");
    s.push_str(PRELUDE);
    for (name, src) in FILES {
        s.push_str(&format!("\n#line 1 \"{name}\"\n"));
        s.push_str(src);
    }
    s
}

/// NVRTC options for virtual architecture `arch` (e.g. `compute_80`) or real one
/// (`sm_90`). `--fmad=false`: no multiply-add contraction, so element-wise results
/// round as the CPU reference's do.
pub fn nvrtc_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".to_string(),
        "--std=c++14".to_string(),
    ]
}

/// A kernel parameter as the launcher passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A device pointer (any pointee type), 8 bytes.
    Ptr,
    /// `i64` (`long long`).
    I64,
    /// `int`.
    I32,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// The `Dims` struct of the prelude, by value.
    Dims,
}

use std::sync::OnceLock;
use ParamKind::{Dims, Ptr, F32, F64, I32, I64};

/// Every kernel of [`program`] with its parameters, in declaration order, read from the
/// sources' `extern "C" __global__` declarations: a kernel's signature is written once,
/// in its `.cu` file. A kernel with a parameter the launcher cannot pass is left out (and
/// the kernel-compile test fails on it).
pub fn signatures() -> &'static [(String, Vec<ParamKind>)] {
    static TABLE: OnceLock<Vec<(String, Vec<ParamKind>)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        declared_kernels(&program())
            .into_iter()
            .filter_map(|(name, params)| Some((name, params.into_iter().collect::<Option<_>>()?)))
            .collect()
    })
}

/// The parameters of kernel `name`, if the program has it.
pub fn signature(name: &str) -> Option<&'static [ParamKind]> {
    signatures()
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, params)| params.as_slice())
}

/// The kind of one C parameter declaration such as `const float* x` or `i64 n`.
pub fn param_kind(decl: &str) -> Option<ParamKind> {
    let decl = decl.trim();
    if decl.contains('*') {
        return Some(Ptr);
    }
    let ty: Vec<&str> = decl.split_whitespace().filter(|w| *w != "const").collect();
    match ty.split_last().map(|(_, t)| t.join(" ")).as_deref() {
        Some("i64" | "long long") => Some(I64),
        Some("int") => Some(I32),
        Some("float") => Some(F32),
        Some("double") => Some(F64),
        Some("Dims") => Some(Dims),
        _ => None,
    }
}

/// Every `extern "C" __global__` kernel declared in `src`: its name and parameter kinds
/// (`None` for a parameter type the launcher cannot pass).
pub fn declared_kernels(src: &str) -> Vec<(String, Vec<Option<ParamKind>>)> {
    const MARK: &str = "extern \"C\" __global__ void ";
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find(MARK) {
        rest = &rest[at + MARK.len()..];
        let (Some(open), Some(close)) = (rest.find('('), rest.find(')')) else {
            break;
        };
        let name = rest[..open].trim().to_string();
        let params = rest[open + 1..close]
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(param_kind)
            .collect();
        out.push((name, params));
        rest = &rest[close..];
    }
    out
}
