// Cross-entropy (cpu_backend/loss.rs): one block per row, sums in f64 through the
// fixed-order `block_sum`.

// Log-sum-exp of row `xr` of c values (max in f32, sum of exp(v - max) in f64).
__device__ double row_lse(const float* xr, i64 c, double* sh, float* shf) {
    float mx = NEG_INF;
    BLOCK_STRIDE(j, c) { mx = fmaxf(mx, xr[j]); }
    mx = block_max(mx, shf);
    double s = 0.0;
    BLOCK_STRIDE(j, c) { s += exp((double)(xr[j] - mx)); }
    return log(block_sum(s, sh)) + (double)mx;
}

// The label of row r, or -1 (and the error flag set) when it is outside 0..c.
__device__ i64 row_label(const void* labels, int idx64, i64 r, i64 c, int* err) {
    i64 l = load_index(labels, idx64, r);
    if (l < 0 || l >= c) {
        *err = 1;
        return -1;
    }
    return l;
}

// Row `r` of a cross-entropy's logits: the row, its lse (all threads of the block) and its
// label (-1, with `*err` set, when out of range).
struct CeRow {
    const float* x;
    double lse;
    i64 label;
};

__device__ CeRow ce_row(const float* logits, const void* labels, int idx64, i64 r, i64 c,
                        int* err) {
    __shared__ double sh[BLOCK];
    __shared__ float shf[BLOCK];
    CeRow row;
    row.x = logits + r * c;
    row.lse = row_lse(row.x, c, sh, shf);
    row.label = row_label(labels, idx64, r, c, err);
    return row;
}

// Per-row loss lse(row) - row[label] into `per_row` (f64); `cross_entropy_mean` finishes.
extern "C" __global__ void cross_entropy(const float* logits, const void* labels, int idx64,
                                         double* per_row, i64 rows, i64 c, int* err) {
    ROWS(r, rows) {
        CeRow row = ce_row(logits, labels, idx64, r, c, err);
        if (threadIdx.x == 0)
            per_row[r] = row.label >= 0 ? row.lse - (double)row.x[row.label] : 0.0;
    }
}

// loss[0] = mean of per_row (one block, fixed order).
extern "C" __global__ void cross_entropy_mean(const double* per_row, float* loss, i64 rows) {
    __shared__ double sh[BLOCK];
    double s = 0.0;
    BLOCK_STRIDE(r, rows) { s += per_row[r]; }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) loss[0] = (float)(s / (double)(rows > 0 ? rows : 1));
}

// (softmax(row) - onehot(label)) / rows.
extern "C" __global__ void cross_entropy_grad(const float* logits, const void* labels, int idx64,
                                              float* dx, i64 rows, i64 c, int* err) {
    ROWS(r, rows) {
        CeRow row = ce_row(logits, labels, idx64, r, c, err);
        BLOCK_STRIDE(j, c) {
            double p = exp((double)row.x[j] - row.lse);
            double t = j == row.label ? 1.0 : 0.0;
            dx[r * c + j] = (float)((p - t) / (double)rows);
        }
    }
}

// nll_loss, mean reduction, one block: loss = -sum of logp [N, C, inner] at (n, t[r], i) for
// each target position r = (n, i) of t [N, inner] that is not `ignore` (in order per
// thread, then the fixed tree), total = their count.
extern "C" __global__ void nll_loss(const float* logp, const void* t, int idx64, float* loss,
                                    float* total, i64 rows, i64 c, i64 inner, i64 ignore,
                                    int* err) {
    __shared__ double sh[BLOCK];
    double s = 0.0, count = 0.0;
    BLOCK_STRIDE(r, rows) {
        if (load_index(t, idx64, r) == ignore) continue;
        i64 l = row_label(t, idx64, r, c, err);
        if (l >= 0) s -= (double)logp[(r / inner * c + l) * inner + r % inner];
        count += 1.0;
    }
    s = block_sum(s, sh);
    count = block_sum(count, sh);
    if (threadIdx.x == 0) {
        loss[0] = (float)(s / count);
        total[0] = (float)count;
    }
}

// nll_loss_backward, mean reduction: -dloss / total at each target, 0 elsewhere.
extern "C" __global__ void nll_loss_backward(const float* dloss, const void* t, int idx64,
                                             const float* total, float* dx, i64 rows, i64 c,
                                             i64 inner, i64 ignore, int* err) {
    GRID_STRIDE(e, rows * c) {
        i64 r = e / (c * inner) * inner + e % inner, j = (e / inner) % c;
        i64 raw = load_index(t, idx64, r);
        float v = 0.0f;
        if (raw != ignore) {
            if (j == 0) row_label(t, idx64, r, c, err);
            if (raw == j) v = -dloss[0] / total[0];
        }
        dx[e] = v;
    }
}
