// The CUDA C the kernels use, for the host: the emulated device compiles the same
// `kernels/*.cu` sources with a C++ compiler after this header (build.rs), each kernel
// called once per thread of each block by `grid.cpp`.
//
// - `threadIdx`, `blockIdx`, `blockDim`, `gridDim`: per OS thread, set by the scheduler
//   before each emulated thread runs.
// - `__shared__`: one copy per OS thread (`static thread_local`), so every emulated thread
//   of a block sees the same array, as on a GPU; like a GPU's, it is not cleared between
//   blocks.
// - `__syncthreads()`: the emulated thread yields to the scheduler, which runs every other
//   thread of the block up to the same barrier before any goes on (threads as fibers).
// - Math: the host's libm, with contraction off (`-ffp-contract=off`, as NVRTC's
//   `--fmad=false`).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct sgc_emu_dim3 {
    unsigned x, y, z;
};

namespace sgc_emu_rt {
extern thread_local sgc_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
void syncthreads();
}  // namespace sgc_emu_rt

using sgc_emu_rt::blockDim;
using sgc_emu_rt::blockIdx;
using sgc_emu_rt::gridDim;
using sgc_emu_rt::threadIdx;

#define __global__
#define __device__ static inline
#define __shared__ static thread_local
#define __syncthreads() sgc_emu_rt::syncthreads()
#define __restrict__

static inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

static inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}

static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
