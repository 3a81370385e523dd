// Element-wise kernels, bias, and the SGD update (cpu_backend/elementwise.rs).

extern "C" __global__ void bias_add(const float* x, const float* bias, float* y, i64 n, i64 dim, i64 inner) {
    GRID_STRIDE(i, n) { y[i] = x[i] + bias[(i / inner) % dim]; }
}

// One block per bias element `d`: the sum over (outer, inner) of dy[(o * dim + d) * inner + i].
extern "C" __global__ void bias_add_grad(const float* dy, float* db, i64 outer, i64 dim, i64 inner) {
    __shared__ double sh[BLOCK];
    ROWS(d, dim) {
        double s = 0.0;
        BLOCK_STRIDE(m, outer * inner) {
            s += (double)dy[((m / inner) * dim + d) * inner + m % inner];
        }
        s = block_sum(s, sh);
        if (threadIdx.x == 0) db[d] = (float)s;
    }
}

extern "C" __global__ void add(const float* a, const float* b, float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

extern "C" __global__ void mul(const float* a, const float* b, float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = a[i] * b[i]; }
}

extern "C" __global__ void relu(const float* x, float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = fmaxf(x[i], 0.0f); }
}

// (y, dy): the gradient passes where the output is positive.
extern "C" __global__ void relu_grad(const float* y, const float* dy, float* dx, i64 n) {
    GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

#define SQRT_2_OVER_PI 0.7978846f
#define GELU_C 0.044715f

extern "C" __global__ void gelu(const float* x, float* y, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

// (x, dy): dy * d/dx [0.5 x (1 + tanh(c (x + 0.044715 x^3)))].
extern "C" __global__ void gelu_grad(const float* x, const float* dy, float* dx, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

// x where positive, else slope * x.
extern "C" __global__ void leaky_relu(const float* x, float* y, float slope, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] > 0.0f ? x[i] : x[i] * slope; }
}

// (dy, x): dy where x is positive, else slope * dy.
extern "C" __global__ void leaky_relu_backward(const float* dy, const float* x, float* dx, float slope,
                                               i64 n) {
    GRID_STRIDE(i, n) { dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * slope; }
}

// param -= lr * grad, in place.
extern "C" __global__ void sgd_update(float* param, const float* grad, float lr, i64 n) {
    GRID_STRIDE(i, n) { param[i] -= lr * grad[i]; }
}

// Zero-fills `n` floats (matmul with an empty inner dimension).
extern "C" __global__ void fill_zero(float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = 0.0f; }
}

// x + v (the exporter's add/sub with a scalar).
extern "C" __global__ void add_scalar(const float* x, float* y, float v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] + v; }
}

// x + v on an i64 tensor (an integer counter such as `num_batches_tracked`).
extern "C" __global__ void add_scalar_i64(const long long* x, long long* y, i64 v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = (i64)((unsigned long long)x[i] + (unsigned long long)v); }
}

extern "C" __global__ void mul_scalar(const float* x, float* y, float v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] * v; }
}

extern "C" __global__ void div_scalar(const float* x, float* y, float v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] / v; }
}

// (dy, x): dy where x > threshold, else 0.
extern "C" __global__ void threshold_backward(const float* dy, const float* x, float* dx,
                                              float threshold, i64 n) {
    GRID_STRIDE(i, n) { dx[i] = x[i] > threshold ? dy[i] : 0.0f; }
}

// Every element `v`.
extern "C" __global__ void fill(float* y, float v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = v; }
}

// The functions of `Unary` (ops/elementwise.rs), by their index in `Unary::ALL`.
#define U_SIGMOID 0
#define U_TANH 1
#define U_SILU 2
#define U_HARDSWISH 3
#define U_HARDSIGMOID 4
#define U_GELU_ERF 5
#define U_MISH 6
#define U_SOFTPLUS 7

__device__ float clampf(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

__device__ float unary_apply(int f, float x) {
    switch (f) {
    case U_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case U_TANH: return tanhf(x);
    case U_SILU: return x / (1.0f + expf(-x));
    case U_HARDSWISH: return x * clampf(x + 3.0f, 0.0f, 6.0f) / 6.0f;
    case U_HARDSIGMOID: return clampf(x / 6.0f + 0.5f, 0.0f, 1.0f);
    case U_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case U_MISH: return x * tanhf(log1pf(expf(x)));
    default: return x > 20.0f ? x : log1pf(expf(x));
    }
}

// dy * f', from the value the backward op reads (the output for sigmoid and tanh).
__device__ float unary_grad(int f, float dy, float v) {
    switch (f) {
    case U_SIGMOID: return dy * (1.0f - v) * v;
    case U_TANH: return dy * (1.0f - v * v);
    case U_SILU: {
        float s = 1.0f / (1.0f + expf(-v));
        return dy * s * (1.0f + v * (1.0f - s));
    }
    case U_HARDSWISH: return v < -3.0f ? 0.0f : (v <= 3.0f ? dy * (v / 3.0f + 0.5f) : dy);
    case U_HARDSIGMOID: return (v > -3.0f && v < 3.0f) ? dy * (1.0f / 6.0f) : 0.0f;
    case U_GELU_ERF: {
        float cdf = 0.5f * (1.0f + erff(v * 0.70710678f));
        float pdf = expf(-0.5f * v * v) * 0.3989423f;
        return dy * (cdf + v * pdf);
    }
    case U_MISH: {
        float t = tanhf(log1pf(expf(v))), s = 1.0f / (1.0f + expf(-v));
        return dy * (t + v * s * (1.0f - t * t));
    }
    default: return v > 20.0f ? dy : dy / (1.0f + expf(-v));
    }
}

extern "C" __global__ void pointwise(const float* x, float* y, int f, i64 n) {
    GRID_STRIDE(i, n) { y[i] = unary_apply(f, x[i]); }
}

// (dy, v) -> dy * f'.
extern "C" __global__ void pointwise_backward(const float* dy, const float* v, float* dx, int f, i64 n) {
    GRID_STRIDE(i, n) { dx[i] = unary_grad(f, dy[i], v[i]); }
}

// Offset in a strided source of output element `e` (`dims`: the output's shape and the
// source's stride per output axis, 0 where it broadcasts).
__device__ i64 strided_offset(i64 e, const Dims& dims) {
    i64 rest = e, src = 0;
    for (i64 a = dims.rank - 1; a >= 0; a--) {
        i64 len = dims.out_shape[a];
        src += (rest % len) * dims.src_strides[a];
        rest /= len;
    }
    return src;
}

// a op b, each read through its broadcast strides; op 0 add, 1 sub, 2 mul, 3 div.
extern "C" __global__ void broadcast_binary(const float* a, const float* b, float* y, int op, i64 n,
                                           Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        float u = a[strided_offset(e, da)], v = b[strided_offset(e, db)];
        y[e] = op == 0 ? u + v : (op == 1 ? u - v : (op == 2 ? u * v : u / v));
    }
}

// x ^ e: x * x and x * x * x for 2 and 3 (ATen's special cases), else powf.
extern "C" __global__ void pow_scalar(const float* x, float* y, float e, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = e == 2.0f ? v * v : (e == 3.0f ? v * v * v : powf(v, e));
    }
}

// Every element of an i64 tensor `v`.
extern "C" __global__ void fill_i64(long long* y, i64 v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = v; }
}

// Every element of a bool tensor `v` (0 or 1).
extern "C" __global__ void fill_bool(unsigned char* y, int v, i64 n) {
    GRID_STRIDE(i, n) { y[i] = (unsigned char)v; }
}

// start + i * step, computed in double, as f32 (`is_i64` 0) or i64.
extern "C" __global__ void arange(void* y, int is_i64, float start, float step, i64 n) {
    GRID_STRIDE(i, n) {
        double v = (double)start + (double)step * (double)i;
        if (is_i64) {
            ((long long*)y)[i] = (long long)v;
        } else {
            ((float*)y)[i] = (float)v;
        }
    }
}

// The lower triangle of the last two axes [rows, cols] of elements of `size` bytes (4 or
// 1): zero bytes where col - row > diagonal.
extern "C" __global__ void tril(const void* x, void* y, int size, i64 rows, i64 cols, i64 diagonal,
                                i64 n) {
    GRID_STRIDE(e, n) {
        i64 r = (e / cols) % rows, c = e % cols;
        int keep = c - r <= diagonal;
        if (size == 4) {
            ((float*)y)[e] = keep ? ((const float*)x)[e] : 0.0f;
        } else {
            ((unsigned char*)y)[e] = keep ? ((const unsigned char*)x)[e] : 0;
        }
    }
}

// where(cond, a, b), each read through its broadcast strides.
extern "C" __global__ void where_select(const unsigned char* cond, const float* a, const float* b,
                                        float* y, i64 n, Dims dc, Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        y[e] = cond[strided_offset(e, dc)] ? a[strided_offset(e, da)] : b[strided_offset(e, db)];
    }
}

// x clamped to [lo, hi] (ReLU6: [0, 6]); NaN stays NaN.
extern "C" __global__ void hardtanh(const float* x, float* y, float lo, float hi, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = v < lo ? lo : (v > hi ? hi : v);
    }
}

// (dy, x) -> dy where lo < x < hi, else 0.
extern "C" __global__ void hardtanh_backward(const float* dy, const float* x, float* dx, float lo,
                                             float hi, i64 n) {
    GRID_STRIDE(i, n) { dx[i] = (x[i] > lo && x[i] < hi) ? dy[i] : 0.0f; }
}

// u op v (floats as IEEE compares: NaN false, except ne); op 0 eq, 1 ne, 2 lt, 3 le, 4 gt,
// 5 ge. One body for f32, f64 and i64 operands.
template <typename T>
__device__ bool cmp_holds(int op, T u, T v) {
    switch (op) {
        case 0: return u == v;
        case 1: return u != v;
        case 2: return u < v;
        case 3: return u <= v;
        case 4: return u > v;
        default: return u >= v;
    }
}

// The bool tensor x op other (bytes 1 and 0).
extern "C" __global__ void compare_scalar(const float* x, unsigned char* y, int op, float other,
                                          i64 n) {
    GRID_STRIDE(i, n) { y[i] = cmp_holds<float>(op, x[i], other) ? 1 : 0; }
}

// The bool tensor a op b, each read through its broadcast strides.
extern "C" __global__ void compare_tensor(const float* a, const float* b, unsigned char* y, int op,
                                          i64 n, Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        y[e] = cmp_holds<float>(op, a[strided_offset(e, da)], b[strided_offset(e, db)]) ? 1 : 0;
    }
}

// Numbers of any dtype the cast codes name (0 f32, 1 i64, 2 i32, 3 bool, 4 u8): element i
// of x as an integer, or as a double (exact for every f32 and every integer below 2^53).
__device__ long long int_at(const void* x, int code, i64 i) {
    switch (code) {
        case 1: return ((const long long*)x)[i];
        case 2: return ((const int*)x)[i];
        case 0: return (long long)((const float*)x)[i];
        default: return ((const unsigned char*)x)[i];
    }
}

__device__ double number_at(const void* x, int code, i64 i) {
    return code == 0 ? (double)((const float*)x)[i] : (double)int_at(x, code, i);
}

// The bool tensor x op other for an integer x (code 1..4): exactly when `other` is a whole
// number within i64 (`is_int`, its value `whole`), else in double, as the CPU reference.
extern "C" __global__ void compare_scalar_int(const void* x, int code, unsigned char* y, int op,
                                              int is_int, long long whole, double other, i64 n) {
    GRID_STRIDE(i, n) {
        bool h = is_int ? cmp_holds<long long>(op, int_at(x, code, i), whole)
                        : cmp_holds<double>(op, (double)int_at(x, code, i), other);
        y[i] = h ? 1 : 0;
    }
}

// The bool tensor a op b of any two numeric dtypes, each read through its broadcast
// strides: two integers compare exactly, anything else in double (two f32 compare as f32
// would: widening is exact).
extern "C" __global__ void compare_numbers(const void* a, int ca, const void* b, int cb,
                                           unsigned char* y, int op, i64 n, Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        i64 i = strided_offset(e, da), j = strided_offset(e, db);
        bool h = (ca != 0 && cb != 0) ? cmp_holds<long long>(op, int_at(a, ca, i), int_at(b, cb, j))
                                       : cmp_holds<double>(op, number_at(a, ca, i), number_at(b, cb, j));
        y[e] = h ? 1 : 0;
    }
}

// a op b (0 add, 1 sub, 2 mul) of two integer tensors (codes 1..4) broadcast to y (code
// 1..4), in i64 with wrapping, then narrowed by wrapping (bool: != 0), as ATen's integer
// arithmetic.
extern "C" __global__ void int_binary(const void* a, int ca, const void* b, int cb, void* y, int cy,
                                      int op, i64 n, Dims da, Dims db) {
    GRID_STRIDE(e, n) {
        unsigned long long u = (unsigned long long)int_at(a, ca, strided_offset(e, da));
        unsigned long long v = (unsigned long long)int_at(b, cb, strided_offset(e, db));
        long long r = (long long)(op == 0 ? u + v : op == 1 ? u - v : u * v);
        if (cy == 1) {
            ((long long*)y)[e] = r;
        } else if (cy == 2) {
            ((int*)y)[e] = (int)r;
        } else if (cy == 3) {
            ((unsigned char*)y)[e] = r != 0;
        } else {
            ((unsigned char*)y)[e] = (unsigned char)r;
        }
    }
}

// Half precision (cuda_backend/widen.rs): f16 or bf16 bits <-> f32, computed with integer
// operations so that the device and the emulated device agree bit for bit, and with the
// CPU backend's `half` crate (NaNs come back quiet, payload kept). Widening is exact;
// narrowing rounds to nearest, ties to even.
__device__ float half_bits_to_f32(unsigned int h, int bf16) {
    unsigned int bits;
    if (bf16) {
        if ((h & 0x7fffu) > 0x7f80u) h |= 0x40u;  // a NaN comes back quiet
        bits = h << 16;
    } else {
        unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
        if (exp == 0x1f) {
            bits = sign | 0x7f800000u | (man ? 0x400000u : 0u) | (man << 13);
        } else if (exp != 0) {
            bits = sign | ((exp + 112) << 23) | (man << 13);
        } else if (man == 0) {
            bits = sign;
        } else {
            // A subnormal: normalise it.
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((unsigned int)(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    }
    return __int_as_float((int)bits);
}

__device__ unsigned int f32_to_half_bits(float f, int bf16) {
    unsigned int x = (unsigned int)__float_as_int(f);
    if (bf16) {
        if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // a quiet NaN
        return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    }
    unsigned int sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | ((a & 0x7fffffu) >> 13);  // NaN, quiet
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (65520 and up)
    if (a >= 0x38800000u) {                        // a normal f16
        unsigned int r = a - 0x38000000u;          // rebias 127 -> 15
        return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal: zero
    // A subnormal f16: shift the 24-bit significand, rounding to nearest even.
    unsigned int e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
    unsigned int shift = 126 - e;  // 14..24 bits dropped
    unsigned int half_way = 1u << (shift - 1), dropped = man & ((1u << shift) - 1);
    unsigned int q = man >> shift;
    if (dropped > half_way || (dropped == half_way && (q & 1u))) q++;
    return sign | q;
}

// x (f16 or bf16 bits) widened into y (f32).
extern "C" __global__ void half_to_f32(const unsigned short* x, float* y, int bf16, i64 n) {
    GRID_STRIDE(i, n) { y[i] = half_bits_to_f32(x[i], bf16); }
}

// x (f32) rounded into y (f16 or bf16 bits).
extern "C" __global__ void f32_to_half(const float* x, unsigned short* y, int bf16, i64 n) {
    GRID_STRIDE(i, n) { y[i] = (unsigned short)f32_to_half_bits(x[i], bf16); }
}

// `_to_copy` between f32, i64, i32, bool and u8 (codes 0..4), as the CPU reference casts:
// floats to integers truncate toward zero and saturate (NaN to 0), integers narrow by
// wrapping, anything to bool is `!= 0`.
extern "C" __global__ void cast(const void* x, int from, void* y, int to, i64 n) {
    GRID_STRIDE(i, n) {
        bool is_float = from == 0;
        float f = 0.0f;
        long long v = 0;
        if (is_float) {
            f = ((const float*)x)[i];
        } else if (from == 1) {
            v = ((const long long*)x)[i];
        } else if (from == 2) {
            v = ((const int*)x)[i];
        } else {
            v = ((const unsigned char*)x)[i];
        }
        if (to == 0) {
            ((float*)y)[i] = is_float ? f : (float)v;
        } else if (to == 3) {
            ((unsigned char*)y)[i] = (is_float ? f != 0.0f : v != 0) ? 1 : 0;
        } else {
            long long w = v;
            if (is_float) {
                if (f != f) w = 0;
                else if (f >= 9.223372036854775807e18f) w = 0x7fffffffffffffffLL;
                else if (f <= -9.223372036854775807e18f) w = (long long)(-0x7fffffffffffffffLL - 1);
                else w = (long long)f;
            }
            if (to == 1) ((long long*)y)[i] = w;
            else if (to == 2) ((int*)y)[i] = (int)(unsigned int)(unsigned long long)w;
            else ((unsigned char*)y)[i] = (unsigned char)(unsigned long long)w;
        }
    }
}
