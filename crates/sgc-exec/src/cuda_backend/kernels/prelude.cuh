// Shared by every kernel file of the CUDA backend (prepended by `sources::program`).
//
// Conventions: f32 data; sizes and indices are 64-bit (`i64`); element-wise kernels use
// grid-stride loops, so any grid size is correct; reductions run one block of exactly
// `BLOCK` threads per output row/channel: each thread sums a fixed strided subset in
// order, then a fixed shared-memory tree combines the partial sums. No atomics: the same
// launch always gives the same bits.

typedef long long i64;

#define BLOCK 256

#define NEG_INF __int_as_float(0xff800000)

#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

#define BLOCK_STRIDE(j, n) for (i64 j = threadIdx.x; j < (n); j += BLOCK)

#define ROWS(r, rows) for (i64 r = blockIdx.x; r < (rows); r += gridDim.x)

// Up to 8 axes of a `transpose`: the output's shape and, per output axis, the stride
// of the input axis it reads.
#define MAX_RANK 8
struct Dims {
    i64 rank;
    i64 out_shape[MAX_RANK];
    i64 src_strides[MAX_RANK];
};

// Sum of `v` over the block, in a fixed tree order; every thread gets the result.
__device__ double block_sum(double v, double* sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// Maximum of `v` over the block (NaN-ignoring, as fmaxf); every thread gets the result.
__device__ float block_max(float v, float* sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// Index `r` of an i64 (`idx64` != 0) or i32 index array.
__device__ i64 load_index(const void* ids, int idx64, i64 r) {
    return idx64 ? ((const long long*)ids)[r] : (i64)((const int*)ids)[r];
}

// Input row/column of output position `o` and tap `k`, or -1 when it falls in the padding.
__device__ i64 window_src(i64 o, i64 k, i64 stride, i64 pad, i64 len) {
    i64 i = o * stride + k - pad;
    return (i >= 0 && i < len) ? i : -1;
}

// The inverse: the output row/column (of `len_out`) whose tap `k` reads input position `i`,
// or -1 when no output's does.
__device__ i64 window_dst(i64 i, i64 k, i64 stride, i64 pad, i64 len_out) {
    i64 t = i + pad - k;
    return (t >= 0 && t % stride == 0 && t / stride < len_out) ? t / stride : -1;
}
