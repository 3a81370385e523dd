// Pooling and nearest upsampling over [N, C, H, W] (cpu_backend/pool.rs).

// Flat index of the first maximum of window (plane, oi, oj), or -1 if no tap is inside.
__device__ i64 window_argmax(const float* x, i64 plane, i64 oi, i64 oj, i64 h, i64 w, i64 k,
                             i64 stride, i64 pad) {
    i64 best = -1;
    for (i64 ki = 0; ki < k; ki++) {
        i64 si = window_src(oi, ki, stride, pad, h);
        if (si < 0) continue;
        for (i64 kj = 0; kj < k; kj++) {
            i64 sj = window_src(oj, kj, stride, pad, w);
            if (sj < 0) continue;
            i64 idx = (plane * h + si) * w + sj;
            if (best < 0 || x[idx] > x[best]) best = idx;
        }
    }
    return best;
}

// Padding counts as -infinity.
extern "C" __global__ void max_pool2d(const float* x, float* y, i64 planes, i64 h, i64 w, i64 k,
                                      i64 stride, i64 pad, i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * ho * wo) {
        i64 oj = e % wo, oi = (e / wo) % ho, plane = e / (wo * ho);
        i64 b = window_argmax(x, plane, oi, oj, h, w, k, stride, pad);
        y[e] = b >= 0 ? x[b] : NEG_INF;
    }
}

// First output position whose window (size k, stride s, padding pad) covers input index i.
__device__ i64 first_window(i64 i, i64 k, i64 stride, i64 pad) {
    i64 num = i + pad - k + 1;
    return num <= 0 ? 0 : (num + stride - 1) / stride;
}

// The output positions [lo, hi) along one axis whose windows cover input index i.
struct Span {
    i64 lo, hi;
};

__device__ Span covering(i64 i, i64 k, i64 stride, i64 pad, i64 n_out) {
    Span s;
    s.lo = first_window(i, k, stride, pad);
    s.hi = min((i + pad) / stride + 1, n_out);
    return s;
}

// Loops over the windows (oi, oj) that cover input position (i, j), in (oi, oj) order (the
// kernel's `k, stride, pad, ho, wo` in scope).
#define COVERING_WINDOWS(oi, oj, i, j)                                                             \
    for (i64 oi = covering(i, k, stride, pad, ho).lo, oi##_end = covering(i, k, stride, pad, ho).hi; \
         oi < oi##_end; oi++)                                                                      \
        for (i64 oj = covering(j, k, stride, pad, wo).lo,                                          \
                 oj##_end = covering(j, k, stride, pad, wo).hi;                                    \
             oj < oj##_end; oj++)

// Each dx element gathers dy of the windows whose first maximum it is, windows in (oi, oj)
// order, the order in which the CPU reference scatters them.
extern "C" __global__ void max_pool2d_grad(const float* x, const float* dy, float* dx, i64 planes,
                                           i64 h, i64 w, i64 k, i64 stride, i64 pad, i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * h * w) {
        i64 j = e % w, i = (e / w) % h, plane = e / (w * h);
        float s = 0.0f;
        COVERING_WINDOWS(oi, oj, i, j) {
            if (window_argmax(x, plane, oi, oj, h, w, k, stride, pad) == e) {
                s += dy[(plane * ho + oi) * wo + oj];
            }
        }
        dx[e] = s;
    }
}

// The mean of each H*W plane: one block per plane.
extern "C" __global__ void global_avg_pool(const float* x, float* y, i64 planes, i64 hw) {
    __shared__ double sh[BLOCK];
    ROWS(p, planes) {
        double s = 0.0;
        BLOCK_STRIDE(j, hw) { s += (double)x[p * hw + j]; }
        s = block_sum(s, sh);
        if (threadIdx.x == 0) y[p] = (float)s / (float)hw;
    }
}

extern "C" __global__ void global_avg_pool_grad(const float* dy, float* dx, i64 planes, i64 hw) {
    GRID_STRIDE(e, planes * hw) { dx[e] = dy[e / hw] / (float)hw; }
}

extern "C" __global__ void upsample_nearest2x(const float* x, float* y, i64 planes, i64 h, i64 w) {
    GRID_STRIDE(e, planes * 4 * h * w) {
        i64 j = e % (2 * w), i = (e / (2 * w)) % (2 * h), p = e / (4 * h * w);
        y[e] = x[(p * h + i / 2) * w + j / 2];
    }
}

// The sum of each 2x2 block of dy [*, 2H, 2W] into dx [*, H, W].
extern "C" __global__ void upsample_nearest2x_grad(const float* dy, float* dx, i64 planes, i64 h, i64 w) {
    GRID_STRIDE(e, planes * h * w) {
        i64 j = e % w, i = (e / w) % h, p = e / (w * h);
        const float* at = dy + (p * 2 * h + 2 * i) * 2 * w + 2 * j;
        dx[e] = at[0] + at[1] + at[2 * w] + at[2 * w + 1];
    }
}

// max_pool2d_with_indices: each window's first maximum and its flat index in the plane
// (-infinity and -1 for a window with no tap inside).
extern "C" __global__ void max_pool2d_indices(const float* x, float* y, long long* idx, i64 planes, i64 h,
                                              i64 w, i64 k, i64 stride, i64 pad, i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * ho * wo) {
        i64 oj = e % wo, oi = (e / wo) % ho, plane = e / (wo * ho);
        i64 b = window_argmax(x, plane, oi, oj, h, w, k, stride, pad);
        y[e] = b >= 0 ? x[b] : NEG_INF;
        idx[e] = b >= 0 ? b - plane * h * w : -1;
    }
}

// Sets the error flag if an index of a pooled plane is outside 0..plane_in.
extern "C" __global__ void pool_index_check(const void* idx, int idx64, i64 n, i64 plane_in, int* err) {
    GRID_STRIDE(e, n) {
        i64 v = load_index(idx, idx64, e);
        if (v < 0 || v >= plane_in) *err = 1;
    }
}

// max_pool2d_with_indices_backward: each dx element gathers dy of the windows covering it
// whose index is it, windows in (oi, oj) order, the order in which the CPU reference adds
// them (indices come from the forward, so each lies in its window).
extern "C" __global__ void max_pool2d_indices_backward(const float* dy, const void* idx, int idx64,
                                                       float* dx, i64 planes, i64 h, i64 w, i64 k,
                                                       i64 stride, i64 pad, i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * h * w) {
        i64 j = e % w, i = (e / w) % h, plane = e / (w * h);
        float s = 0.0f;
        COVERING_WINDOWS(oi, oj, i, j) {
            i64 at = (plane * ho + oi) * wo + oj;
            if (load_index(idx, idx64, at) == i * w + j) s += dy[at];
        }
        dx[e] = s;
    }
}

// ATen's divisor of window (oi, oj) (cpu_backend/pool.rs `avg_divisor`): `value` when
// given (divisor_override > 0); else the window's extent clipped to the padded image
// (count_include_pad) or to the image itself, at least 1.
__device__ float avg_divisor(i64 oi, i64 oj, i64 h, i64 w, i64 k, i64 stride, i64 pad,
                             int count_pad, i64 value) {
    if (value > 0) return (float)value;
    i64 r0 = oi * stride - pad, c0 = oj * stride - pad;
    i64 r1 = min(r0 + k, h + pad), c1 = min(c0 + k, w + pad);
    i64 rows = count_pad ? r1 - r0 : min(r1, h) - max(r0, (i64)0);
    i64 cols = count_pad ? c1 - c0 : min(c1, w) - max(c0, (i64)0);
    return (float)max(rows * cols, (i64)1);
}

// avg_pool2d: each window's sum (taps in (ki, kj) order) over its divisor; ho and wo may
// hold a last window that starts inside the image but ends past it (ceil_mode).
extern "C" __global__ void avg_pool2d(const float* x, float* y, i64 planes, i64 h, i64 w, i64 k,
                                      i64 stride, i64 pad, i64 ho, i64 wo, int count_pad,
                                      i64 divisor) {
    GRID_STRIDE(e, planes * ho * wo) {
        i64 oj = e % wo, oi = (e / wo) % ho, plane = e / (wo * ho);
        float s = 0.0f;
        for (i64 ki = 0; ki < k; ki++) {
            i64 si = window_src(oi, ki, stride, pad, h);
            if (si < 0) continue;
            for (i64 kj = 0; kj < k; kj++) {
                i64 sj = window_src(oj, kj, stride, pad, w);
                if (sj >= 0) s += x[(plane * h + si) * w + sj];
            }
        }
        y[e] = s / avg_divisor(oi, oj, h, w, k, stride, pad, count_pad, divisor);
    }
}

// avg_pool2d_backward: each dx element gathers dy over the divisor of each window covering
// it, in (oi, oj) order.
extern "C" __global__ void avg_pool2d_backward(const float* dy, float* dx, i64 planes, i64 h, i64 w,
                                               i64 k, i64 stride, i64 pad, i64 ho, i64 wo,
                                               int count_pad, i64 divisor) {
    GRID_STRIDE(e, planes * h * w) {
        i64 j = e % w, i = (e / w) % h, plane = e / (w * h);
        float s = 0.0f;
        COVERING_WINDOWS(oi, oj, i, j) {
            float div = avg_divisor(oi, oj, h, w, k, stride, pad, count_pad, divisor);
            s += dy[(plane * ho + oi) * wo + oj] / div;
        }
        dx[e] = s;
    }
}

// ATen's adaptive window of output position o: [o * len / out, ceil((o + 1) * len / out)).
__device__ void adaptive_window(i64 o, i64 out, i64 len, i64* lo, i64* hi) {
    *lo = o * len / out;
    *hi = ((o + 1) * len + out - 1) / out;
}

// The mean over each adaptive window of x [planes, h, w] into y [planes, ho, wo], summed
// in (row, column) order and divided by the height then the width, as the CPU reference.
extern "C" __global__ void adaptive_avg_pool2d(const float* x, float* y, i64 planes, i64 h, i64 w,
                                               i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * ho * wo) {
        i64 oj = e % wo, oi = (e / wo) % ho, plane = e / (wo * ho);
        i64 i0, i1, j0, j1;
        adaptive_window(oi, ho, h, &i0, &i1);
        adaptive_window(oj, wo, w, &j0, &j1);
        float s = 0.0f;
        for (i64 i = i0; i < i1; i++)
            for (i64 j = j0; j < j1; j++) s += x[(plane * h + i) * w + j];
        y[e] = s / (float)(i1 - i0) / (float)(j1 - j0);
    }
}

// Its backward, one thread per dx element: the share of every window covering it, added
// in (row, column) order of the windows, as the CPU reference scatters them.
extern "C" __global__ void adaptive_avg_pool2d_backward(const float* dy, float* dx, i64 planes,
                                                        i64 h, i64 w, i64 ho, i64 wo) {
    GRID_STRIDE(e, planes * h * w) {
        i64 j = e % w, i = (e / w) % h, plane = e / (w * h);
        float s = 0.0f;
        for (i64 oi = 0; oi < ho; oi++) {
            i64 i0, i1;
            adaptive_window(oi, ho, h, &i0, &i1);
            if (i < i0 || i >= i1) continue;
            for (i64 oj = 0; oj < wo; oj++) {
                i64 j0, j1;
                adaptive_window(oj, wo, w, &j0, &j1);
                if (j < j0 || j >= j1) continue;
                s += dy[(plane * ho + oi) * wo + oj] / (float)(i1 - i0) / (float)(j1 - j0);
            }
        }
        dx[e] = s;
    }
}
