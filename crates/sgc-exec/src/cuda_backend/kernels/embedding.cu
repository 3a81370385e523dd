// Embedding lookups and their gradient (cpu_backend/embedding.rs).

// Row ids[r] of w [V, D] into row r of y; an id outside 0..V sets the error flag and
// gives a zero row.
extern "C" __global__ void embedding(const void* ids, int idx64, const float* w, float* y, i64 rows,
                                     i64 v, i64 d, int* err) {
    GRID_STRIDE(e, rows * d) {
        i64 id = load_index(ids, idx64, e / d);
        if (id < 0 || id >= v) {
            *err = 1;
            y[e] = 0.0f;
        } else {
            y[e] = w[id * d + e % d];
        }
    }
}

// dw[ids[r]] += dy[r], zero-filled first: one thread per column j adds the rows in order,
// as the CPU reference does, so repeated ids accumulate deterministically without atomics.
extern "C" __global__ void embedding_grad(const void* ids, int idx64, const float* dy, float* dw,
                                          i64 rows, i64 v, i64 d, int* err) {
    GRID_STRIDE(j, d) {
        for (i64 k = 0; k < v; k++) dw[k * d + j] = 0.0f;
        for (i64 r = 0; r < rows; r++) {
            i64 id = load_index(ids, idx64, r);
            if (id < 0 || id >= v) {
                *err = 1;
                continue;
            }
            dw[id * d + j] += dy[r * d + j];
        }
    }
}

// y[ids[r]] = values[r] (accumulate: y[ids[r]] += values[r]) over y [V, D], already a copy of
// x: one thread per column j takes the rows in order, so repeated ids end as on the CPU.
extern "C" __global__ void index_put_rows(const void* ids, int idx64, const float* values,
                                          float* y, i64 rows, i64 v, i64 d, int accumulate,
                                          int* err) {
    GRID_STRIDE(j, d) {
        for (i64 r = 0; r < rows; r++) {
            i64 id = load_index(ids, idx64, r);
            if (id < 0 || id >= v) {
                *err = 1;
                continue;
            }
            float src = values[r * d + j];
            y[id * d + j] = accumulate ? y[id * d + j] + src : src;
        }
    }
}
