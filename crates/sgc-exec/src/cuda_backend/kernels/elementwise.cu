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
