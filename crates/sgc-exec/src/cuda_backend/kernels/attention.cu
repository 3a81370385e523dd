// Scaled dot-product attention's row kernels (cpu_backend/attention.rs); the products
// run on cuBLAS. One block per row of scores [rows = batch * l, s].

// Scores to probabilities in place: v = scale * p (-inf where `causal` hides key j from
// query i = row % l), then, when `fresh`, the row's log-sum-exp into lse[row] (else read
// from it), and p = exp(v - lse).
extern "C" __global__ void sdpa_probs(float* p, float* lse, i64 rows, i64 l, i64 s, float scale,
                                      int causal, int fresh) {
    __shared__ double sh[BLOCK];
    __shared__ float shf[BLOCK];
    ROWS(r, rows) {
        float* row = p + r * s;
        i64 i = r % l;
        float mx = NEG_INF;
        BLOCK_STRIDE(j, s) {
            float v = (causal && j > i) ? NEG_INF : row[j] * scale;
            row[j] = v;
            mx = fmaxf(mx, v);
        }
        __syncthreads();
        float m = block_max(mx, shf);
        double sum = 0.0;
        BLOCK_STRIDE(j, s) { sum += (double)expf(row[j] - m); }
        double total = block_sum(sum, sh);
        if (fresh && threadIdx.x == 0) lse[r] = m + (float)log(total);
        __syncthreads();
        float at = fresh ? m + (float)log(total) : lse[r];
        BLOCK_STRIDE(j, s) { row[j] = expf(row[j] - at); }
        __syncthreads();
    }
}

// The scores' gradient in place of dp: dp = p * (dp - sum_j p * dp) * scale.
extern "C" __global__ void sdpa_score_grad(const float* p, float* dp, i64 rows, i64 s,
                                           float scale) {
    __shared__ double sh[BLOCK];
    ROWS(r, rows) {
        const float* pr = p + r * s;
        float* dr = dp + r * s;
        double acc = 0.0;
        BLOCK_STRIDE(j, s) { acc += (double)(pr[j] * dr[j]); }
        float dot = (float)block_sum(acc, sh);
        BLOCK_STRIDE(j, s) { dr[j] = pr[j] * (dr[j] - dot) * scale; }
        __syncthreads();
    }
}
