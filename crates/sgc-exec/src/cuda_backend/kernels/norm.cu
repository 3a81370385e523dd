// Normalisations and softmax (cpu_backend/norm.rs): one block per channel or
// row, sums in f64 through the fixed-order `block_sum`.

// Flat index of the m-th value of channel c in [outer, feat, inner].
__device__ i64 channel_at(i64 m, i64 c, i64 feat, i64 inner) {
    return ((m / inner) * feat + c) * inner + m % inner;
}

// (x, gamma, beta) -> (y, mean, invstd): statistics per channel over outer * inner values.
extern "C" __global__ void batch_norm(const float* x, const float* gamma, const float* beta, float eps,
                                      float* y, float* mean_out, float* invstd_out, i64 outer,
                                      i64 feat, i64 inner) {
    __shared__ double sh[BLOCK];
    i64 m = outer * inner;
    ROWS(c, feat) {
        double s = 0.0;
        BLOCK_STRIDE(k, m) { s += (double)x[channel_at(k, c, feat, inner)]; }
        double mean = block_sum(s, sh) / (double)m;
        double v = 0.0;
        BLOCK_STRIDE(k, m) {
            double d = (double)x[channel_at(k, c, feat, inner)] - mean;
            v += d * d;
        }
        double var = block_sum(v, sh) / (double)m;
        float invstd = (float)(1.0 / sqrt(var + (double)eps));
        float meanf = (float)mean;
        BLOCK_STRIDE(k, m) {
            i64 i = channel_at(k, c, feat, inner);
            y[i] = (x[i] - meanf) * invstd * gamma[c] + beta[c];
        }
        if (threadIdx.x == 0) {
            mean_out[c] = meanf;
            invstd_out[c] = invstd;
        }
    }
}

// (x, gamma, mean, invstd, dy) -> (dx, dgamma, dbeta):
// dx = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma).
extern "C" __global__ void batch_norm_grad(const float* x, const float* gamma, const float* mean,
                                           const float* invstd, const float* dy, float* dx,
                                           float* dgamma, float* dbeta, i64 outer, i64 feat, i64 inner) {
    __shared__ double sh[BLOCK];
    i64 m = outer * inner;
    ROWS(c, feat) {
        double sb = 0.0, sg = 0.0;
        BLOCK_STRIDE(k, m) {
            i64 i = channel_at(k, c, feat, inner);
            sb += (double)dy[i];
            sg += (double)dy[i] * (double)((x[i] - mean[c]) * invstd[c]);
        }
        double db = block_sum(sb, sh);
        double dg = block_sum(sg, sh);
        double kk = (double)gamma[c] * (double)invstd[c] / (double)m;
        BLOCK_STRIDE(k, m) {
            i64 i = channel_at(k, c, feat, inner);
            double xhat = (double)((x[i] - mean[c]) * invstd[c]);
            dx[i] = (float)(kk * ((double)m * (double)dy[i] - db - xhat * dg));
        }
        if (threadIdx.x == 0) {
            dgamma[c] = (float)dg;
            dbeta[c] = (float)db;
        }
    }
}

// (x, gamma, beta) -> (y, mean, rstd) over rows of `feat` values.
extern "C" __global__ void layer_norm(const float* x, const float* gamma, const float* beta, float eps,
                                      float* y, float* mean_out, float* rstd_out, i64 rows, i64 feat) {
    __shared__ double sh[BLOCK];
    ROWS(r, rows) {
        const float* xr = x + r * feat;
        double s = 0.0;
        BLOCK_STRIDE(j, feat) { s += (double)xr[j]; }
        double mean = block_sum(s, sh) / (double)feat;
        double v = 0.0;
        BLOCK_STRIDE(j, feat) {
            double d = (double)xr[j] - mean;
            v += d * d;
        }
        double var = block_sum(v, sh) / (double)feat;
        float rstd = (float)(1.0 / sqrt(var + (double)eps));
        float meanf = (float)mean;
        BLOCK_STRIDE(j, feat) { y[r * feat + j] = (xr[j] - meanf) * rstd * gamma[j] + beta[j]; }
        if (threadIdx.x == 0) {
            mean_out[r] = meanf;
            rstd_out[r] = rstd;
        }
    }
}

// dx of layer_norm_grad, one block per row: with g = dy * gamma,
// dx = rstd / D * (D * g - sum g - xhat * sum g * xhat).
extern "C" __global__ void layer_norm_grad(const float* x, const float* gamma, const float* mean,
                                           const float* rstd, const float* dy, float* dx, i64 rows,
                                           i64 feat) {
    __shared__ double sh[BLOCK];
    double d = (double)feat;
    ROWS(r, rows) {
        double sg = 0.0, sgx = 0.0;
        BLOCK_STRIDE(j, feat) {
            i64 i = r * feat + j;
            double g = (double)dy[i] * (double)gamma[j];
            sg += g;
            sgx += g * (double)((x[i] - mean[r]) * rstd[r]);
        }
        sg = block_sum(sg, sh);
        sgx = block_sum(sgx, sh);
        BLOCK_STRIDE(j, feat) {
            i64 i = r * feat + j;
            double g = (double)dy[i] * (double)gamma[j];
            double xhat = (double)((x[i] - mean[r]) * rstd[r]);
            dx[i] = (float)((double)rstd[r] / d * (d * g - sg - xhat * sgx));
        }
    }
}

// dgamma and dbeta of layer_norm_grad: one thread per feature, rows summed in order.
extern "C" __global__ void layer_norm_grad_params(const float* x, const float* mean, const float* rstd,
                                                  const float* dy, float* dgamma, float* dbeta, i64 rows,
                                                  i64 feat) {
    GRID_STRIDE(j, feat) {
        double sg = 0.0, sb = 0.0;
        for (i64 r = 0; r < rows; r++) {
            i64 i = r * feat + j;
            sg += (double)dy[i] * (double)((x[i] - mean[r]) * rstd[r]);
            sb += (double)dy[i];
        }
        dgamma[j] = (float)sg;
        dbeta[j] = (float)sb;
    }
}

// Softmax of scale * x over rows of n; with `causal`, row q of each n x n block keeps keys
// 0..=q (the others get exactly 0).
extern "C" __global__ void softmax(const float* x, float* y, i64 rows, i64 n, float scale, int causal) {
    __shared__ double sh[BLOCK];
    __shared__ float shf[BLOCK];
    ROWS(r, rows) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        i64 keep = causal ? (r % n) + 1 : n;
        float mx = NEG_INF;
        BLOCK_STRIDE(j, keep) { mx = fmaxf(mx, scale * xr[j]); }
        mx = block_max(mx, shf);
        double s = 0.0;
        BLOCK_STRIDE(j, keep) {
            float e = expf(scale * xr[j] - mx);
            yr[j] = e;
            s += (double)e;
        }
        float inv = (float)(1.0 / block_sum(s, sh));
        BLOCK_STRIDE(j, n) { yr[j] = j < keep ? yr[j] * inv : 0.0f; }
    }
}

// scale * y * (dy - sum(dy * y)) per row.
extern "C" __global__ void softmax_grad(const float* y, const float* dy, float* dx, i64 rows, i64 n,
                                        float scale) {
    __shared__ double sh[BLOCK];
    ROWS(r, rows) {
        double s = 0.0;
        BLOCK_STRIDE(j, n) { s += (double)(y[r * n + j] * dy[r * n + j]); }
        float dot = (float)block_sum(s, sh);
        BLOCK_STRIDE(j, n) {
            i64 i = r * n + j;
            dx[i] = scale * y[i] * (dy[i] - dot);
        }
    }
}

// sgc.batch_norm_update_stats, per channel: var = 1/invstd^2 - eps unbiased by `unbias`,
// each running statistic moved `momentum` of the way to the batch's (f64, as the CPU).
extern "C" __global__ void batch_norm_update_stats(const float* rm, const float* rv, const float* mean,
                                                   const float* invstd, float* out_mean, float* out_var,
                                                   float momentum, float eps, i64 count, i64 c) {
    GRID_STRIDE(i, c) {
        double m = (double)momentum, unbias = (double)count / ((double)count - 1.0);
        double is = (double)invstd[i];
        double var = 1.0 / (is * is) - (double)eps;
        out_mean[i] = (float)((1.0 - m) * (double)rm[i] + m * (double)mean[i]);
        out_var[i] = (float)((1.0 - m) * (double)rv[i] + m * var * unbias);
    }
}

// Log-softmax over rows of n: v - max - ln(sum exp(v - max)), the sum in f64.
extern "C" __global__ void log_softmax(const float* x, float* y, i64 rows, i64 n) {
    __shared__ double sh[BLOCK];
    __shared__ float shf[BLOCK];
    ROWS(r, rows) {
        const float* xr = x + r * n;
        float mx = NEG_INF;
        BLOCK_STRIDE(j, n) { mx = fmaxf(mx, xr[j]); }
        mx = block_max(mx, shf);
        double s = 0.0;
        BLOCK_STRIDE(j, n) { s += exp((double)(xr[j] - mx)); }
        float lse = (float)log(block_sum(s, sh));
        BLOCK_STRIDE(j, n) { y[r * n + j] = xr[j] - mx - lse; }
    }
}

// (dy, y) -> dy - exp(y) * sum(dy) over rows of n.
extern "C" __global__ void log_softmax_backward(const float* dy, const float* y, float* dx, i64 rows,
                                                i64 n) {
    __shared__ double sh[BLOCK];
    ROWS(r, rows) {
        double s = 0.0;
        BLOCK_STRIDE(j, n) { s += (double)dy[r * n + j]; }
        s = block_sum(s, sh);
        BLOCK_STRIDE(j, n) {
            i64 i = r * n + j;
            dx[i] = dy[i] - (float)(exp((double)y[i]) * s);
        }
    }
}
