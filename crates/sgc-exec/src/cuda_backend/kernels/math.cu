// Core ATen's math functions (ops/math.rs, cpu_backend/math.rs): one pass over the
// elements. `f` is the function's index in `MathFn::ALL`; NaN propagates as in ATen
// (`maximum`, `minimum` and `clamp` return NaN for a NaN operand, `sign(NaN)` is NaN),
// `round` is half to even (`rintf` in the default rounding mode).

__device__ float math_fn(int f, float x) {
    switch (f) {
        case 0: return -x;
        case 1: return expf(x);
        case 2: return exp2f(x);
        case 3: return expm1f(x);
        case 4: return logf(x);
        case 5: return log2f(x);
        case 6: return log10f(x);
        case 7: return log1pf(x);
        case 8: return sqrtf(x);
        case 9: return 1.0f / sqrtf(x);
        case 10: return 1.0f / x;
        case 11: return fabsf(x);
        case 12: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
        case 13: return sinf(x);
        case 14: return cosf(x);
        case 15: return tanf(x);
        case 16: return asinf(x);
        case 17: return acosf(x);
        case 18: return atanf(x);
        case 19: return sinhf(x);
        case 20: return coshf(x);
        case 21: return asinhf(x);
        case 22: return acoshf(x);
        case 23: return atanhf(x);
        case 24: return erff(x);
        case 25: return floorf(x);
        case 26: return ceilf(x);
        case 27: return rintf(x);
        default: return truncf(x);
    }
}

// y = f(x), element by element.
extern "C" __global__ void math_of(const float* x, float* y, int f, i64 n) {
    GRID_STRIDE(i, n) { y[i] = math_fn(f, x[i]); }
}

// y = x clamped to [lo, hi] (a bound used only where its flag is set): NaN stays NaN,
// `lo` first, then `hi`.
extern "C" __global__ void math_clamp(const float* x, float* y, float lo, int has_lo, float hi,
                                      int has_hi, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        if (v == v) {
            if (has_lo && v < lo) v = lo;
            if (has_hi && v > hi) v = hi;
        }
        y[i] = v;
    }
}

// a op b, each read through its broadcast strides; op 0 maximum, 1 minimum, 2 pow.
extern "C" __global__ void math_binary(const float* a, const float* b, float* y, int op, i64 n,
                                       Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        float u = a[strided_offset(e, da)], v = b[strided_offset(e, db)];
        float nan = __int_as_float(0x7fc00000);
        if (op == 2) {
            y[e] = powf(u, v);
        } else if (u != u || v != v) {
            y[e] = nan;
        } else {
            y[e] = op == 0 ? fmaxf(u, v) : fminf(u, v);
        }
    }
}
