//! The CUDA kernels compile, without a GPU: the backend's whole program
//! (`sgc_exec::cuda_backend::sources::program`) goes through NVRTC to PTX for compute_80 and
//! compute_90, the PTX is assembled by `ptxas` for sm_80 and sm_90, and NVRTC also builds
//! the sm_80/sm_90 CUBIN the backend loads at run time. The launcher's parameter table is
//! checked against the kernels' declarations.
//!
//! NVRTC and ptxas come from PyPI (`scripts/install-cuda-tools.sh`): NVRTC is opened by path
//! (`$SGC_NVRTC`, else the `nvidia-cuda-nvrtc-cu12` wheel found through `python3`), ptxas is
//! `$SGC_PTXAS`, else the `nvidia-cuda-nvcc-cu12` wheel's, else `ptxas` on `PATH`. Without
//! them the compile test is skipped with the reason and counted as ignored, unless
//! `SGC_REQUIRE_CUDA_TOOLS=1` (CI), where the run fails. `SGC_EXPECT_NVRTC=12.6` (CI) also
//! pins NVRTC's version; on a GPU machine the toolkit's own NVRTC compiles.

mod skip;

use sgc_exec::cuda_backend::sources::{self, declared_kernels, nvrtc_options};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL: &str = "bash scripts/install-cuda-tools.sh";
const ARCHS: [u32; 2] = [80, 90];

fn launcher_signatures_match_the_kernel_declarations() {
    // The launcher's table is the declarations themselves: every parameter must be one it
    // can pass, and every name unique.
    let declared = declared_kernels(&sources::program());
    for (name, params) in &declared {
        assert!(
            params.iter().all(Option::is_some),
            "`{name}`: a parameter type the launcher cannot pass"
        );
    }
    let signatures = sources::signatures();
    assert_eq!(declared.len(), signatures.len(), "{declared:?}");
    let mut names: Vec<&str> = signatures.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), signatures.len(), "duplicate kernel names");
}

fn every_cpu_kernel_name_has_a_cuda_kernel_or_is_cublas() {
    // Same names side by side: every op type is either a kernel of the same name or a
    // cuBLAS product (matmul family; conv2d's GEMM with im2col, whose grads use col2im).
    let cublas = [
        "matmul",
        "matmul_tn",
        "batched_matmul",
        "conv2d",
        "conv2d_grad_input",
        "conv2d_grad_weight",
    ];
    // The builder's kinds; the exporter's kinds marked for CUDA lower onto their kernels.
    let builder =
        sgc_exec::kernel::kernels().filter(|(k, cuda)| *cuda && !k.name().starts_with("aten."));
    for op in builder.map(|(k, _)| k.name()) {
        // The exporter's own `sgc.*` kinds: the kernel of the name without the prefix.
        let kernel = op.strip_prefix("sgc.").unwrap_or(op);
        assert!(
            cublas.contains(&op) || sources::signature(kernel).is_some(),
            "op type `{op}` has no CUDA kernel"
        );
    }
}

/// The NVRTC version `SGC_EXPECT_NVRTC=MAJOR.MINOR` pins (CI: 12.6), if any.
fn expected_nvrtc() -> Option<(i32, i32)> {
    let v = std::env::var("SGC_EXPECT_NVRTC").ok()?;
    let (major, minor) = v.split_once('.')?;
    let parse = |x: &str| {
        x.trim()
            .parse()
            .unwrap_or_else(|_| panic!("SGC_EXPECT_NVRTC={v}: write MAJOR.MINOR, as 12.6"))
    };
    Some((parse(major), parse(minor)))
}

fn required() -> bool {
    std::env::var("SGC_REQUIRE_CUDA_TOOLS").is_ok_and(|v| v == "1")
}

/// Directory of a Python package of the PyPI CUDA wheels (namespace packages included).
fn wheel_dir(module: &str) -> Option<PathBuf> {
    let code = format!("import {module} as m, os; print(list(m.__path__)[0])");
    let out = Command::new("python3").args(["-c", &code]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
}

fn find_nvrtc() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SGC_NVRTC") {
        return Some(PathBuf::from(p));
    }
    let lib = wheel_dir("nvidia.cuda_nvrtc")?.join("lib");
    let mut libs: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc.so."))
        })
        .collect();
    libs.sort();
    libs.into_iter().next()
}

fn find_ptxas() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SGC_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let wheel = wheel_dir("nvidia.cuda_nvcc").map(|d| d.join("bin/ptxas"));
    if let Some(p) = wheel.filter(|p| p.exists()) {
        return Some(p);
    }
    Command::new("ptxas")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("ptxas"))
}

type Prog = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Prog) -> c_int;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

/// NVRTC opened by path (its C API, the few calls a compile needs).
struct Nvrtc {
    lib: libloading::Library,
}

/// What one compile produced.
struct Output {
    image: Vec<u8>,
    log: String,
}

impl Nvrtc {
    fn open(path: &Path) -> Result<Self, String> {
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        Ok(Nvrtc { lib })
    }

    fn sym<T: Copy>(&self, name: &str) -> T {
        // SAFETY: every symbol is read with the C signature NVRTC's header declares.
        unsafe {
            *self
                .lib
                .get::<T>(name.as_bytes())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    }

    fn version(&self) -> (i32, i32) {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let rc = unsafe { self.sym::<VersionFn>("nvrtcVersion")(&mut major, &mut minor) };
        assert_eq!(rc, 0, "nvrtcVersion");
        (major, minor)
    }

    /// Compiles `src` with `options`; `cubin` reads the CUBIN instead of the PTX.
    fn compile(&self, src: &str, options: &[String], cubin: bool) -> Result<Output, String> {
        let src = CString::new(src).unwrap();
        let name = CString::new("sgc_kernels.cu").unwrap();
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).unwrap())
            .collect();
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: NVRTC's C API with live, NUL-terminated strings; the program is destroyed
        // before returning.
        unsafe {
            let rc = self.sym::<CreateFn>("nvrtcCreateProgram")(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            assert_eq!(rc, 0, "nvrtcCreateProgram");
            let rc = self.sym::<CompileFn>("nvrtcCompileProgram")(
                prog,
                ptrs.len() as c_int,
                ptrs.as_ptr(),
            );
            let log = self.read(prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog");
            let log = String::from_utf8_lossy(&log)
                .trim_end_matches('\0')
                .to_string();
            let image = if rc == 0 {
                let (size, get) = if cubin {
                    ("nvrtcGetCUBINSize", "nvrtcGetCUBIN")
                } else {
                    ("nvrtcGetPTXSize", "nvrtcGetPTX")
                };
                Ok(self.read(prog, size, get))
            } else {
                Err(format!("NVRTC error {rc} with {options:?}:\n{log}"))
            };
            self.sym::<DestroyFn>("nvrtcDestroyProgram")(&mut prog);
            Ok(Output { image: image?, log })
        }
    }

    /// Reads a sized buffer out of a compiled program.
    unsafe fn read(&self, prog: Prog, size_fn: &str, get_fn: &str) -> Vec<u8> {
        let mut size = 0usize;
        assert_eq!(
            unsafe { self.sym::<SizeFn>(size_fn)(prog, &mut size) },
            0,
            "{size_fn}"
        );
        let mut buf = vec![0u8; size];
        assert_eq!(
            unsafe { self.sym::<GetFn>(get_fn)(prog, buf.as_mut_ptr() as *mut c_char) },
            0,
            "{get_fn}"
        );
        buf
    }
}

/// Assembles `ptx` for `sm_<arch>` with ptxas; returns its `-v` report's line count.
fn assemble(ptxas: &Path, ptx: &[u8], arch: u32) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("sgc-cuda-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (src, out) = (
        dir.join(format!("k{arch}.ptx")),
        dir.join(format!("k{arch}.cubin")),
    );
    let text = ptx.strip_suffix(b"\0").unwrap_or(ptx);
    std::fs::write(&src, text).map_err(|e| e.to_string())?;
    let run = Command::new(ptxas)
        .arg(format!("-arch=sm_{arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let report = String::from_utf8_lossy(&run.stderr).to_string();
    let cubin = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    if !run.status.success() || cubin == 0 {
        return Err(format!("ptxas -arch=sm_{arch} failed:\n{report}"));
    }
    Ok(report)
}

fn ptxas_version(ptxas: &Path) -> String {
    Command::new(ptxas)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

fn every_kernel_compiles_to_ptx_and_assembles_for_sm80_and_sm90() {
    let (Some(nvrtc_path), Some(ptxas)) = (find_nvrtc(), find_ptxas()) else {
        panic!("NVRTC or ptxas not found (`main` skips this test then)");
    };
    let nvrtc = Nvrtc::open(&nvrtc_path).unwrap_or_else(|e| panic!("{e}"));
    println!("NVRTC {:?} at {}", nvrtc.version(), nvrtc_path.display());
    if let Some(want) = expected_nvrtc() {
        // CI compiles with the NVRTC that scripts/install-cuda-tools.sh pins, the version of
        // cudarc's bindings (`cuda-12060`); a GPU machine compiles with its own toolkit's.
        assert_eq!(
            nvrtc.version(),
            want,
            "SGC_EXPECT_NVRTC asks for NVRTC {}.{}",
            want.0,
            want.1
        );
    }
    println!("ptxas at {}: {}", ptxas.display(), ptxas_version(&ptxas));
    let program = sources::program();
    for arch in ARCHS {
        let ptx = nvrtc
            .compile(&program, &nvrtc_options(&format!("compute_{arch}")), false)
            .unwrap_or_else(|e| panic!("compute_{arch}: {e}"));
        assert!(
            ptx.log.is_empty(),
            "compute_{arch}: NVRTC warnings:\n{}",
            ptx.log
        );
        let text = String::from_utf8_lossy(&ptx.image);
        for (name, _) in sources::signatures() {
            assert!(
                text.contains(&format!(".entry {name}(")),
                "compute_{arch}: no entry `{name}`"
            );
        }
        let report = assemble(&ptxas, &ptx.image, arch).unwrap_or_else(|e| panic!("{e}"));
        let cubin = nvrtc
            .compile(&program, &nvrtc_options(&format!("sm_{arch}")), true)
            .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
        assert!(!cubin.image.is_empty(), "sm_{arch}: empty CUBIN");
        println!(
            "sm_{arch}: {} kernels, PTX {} bytes, ptxas ok ({} report lines), NVRTC CUBIN {} bytes",
            sources::signatures().len(),
            ptx.image.len(),
            report.lines().count(),
            cubin.image.len()
        );
    }
}

fn main() {
    let tools = match (find_nvrtc(), find_ptxas()) {
        (Some(_), Some(_)) => None,
        _ => {
            let msg = format!("NVRTC or ptxas not found (install them with `{INSTALL}`)");
            assert!(!required(), "SGC_REQUIRE_CUDA_TOOLS=1 but {msg}");
            Some(msg)
        }
    };
    skip::run(vec![
        skip::test(
            "launcher_signatures_match_the_kernel_declarations",
            launcher_signatures_match_the_kernel_declarations,
        ),
        skip::test(
            "every_cpu_kernel_name_has_a_cuda_kernel_or_is_cublas",
            every_cpu_kernel_name_has_a_cuda_kernel_or_is_cublas,
        ),
        skip::unless(
            skip::test(
                "every_kernel_compiles_to_ptx_and_assembles_for_sm80_and_sm90",
                every_kernel_compiles_to_ptx_and_assembles_for_sm80_and_sm90,
            ),
            &tools,
        ),
    ])
}
