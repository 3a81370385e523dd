// Data movement: embedding lookups, transpose, concat, slice, reshape copies
// (cpu_backend/shape.rs).

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

// A reshape into its own storage: a plain copy.
extern "C" __global__ void reshape(const float* x, float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i]; }
}

// y at output index (i_0..i_r) = x at sum_k i_k * src_strides[k].
extern "C" __global__ void transpose(const float* x, float* y, i64 n, Dims dims) {
    GRID_STRIDE(e, n) {
        i64 rest = e, src = 0;
        for (i64 a = dims.rank - 1; a >= 0; a--) {
            i64 len = dims.out_shape[a];
            src += (rest % len) * dims.src_strides[a];
            rest /= len;
        }
        y[e] = x[src];
    }
}

// One input of a concat: x [outer, chunk] into columns at..at+chunk of y [outer, row].
extern "C" __global__ void concat(const float* x, float* y, i64 outer, i64 chunk, i64 row, i64 at) {
    GRID_STRIDE(e, outer * chunk) { y[(e / chunk) * row + at + e % chunk] = x[e]; }
}

// y [outer, chunk] = columns from..from+chunk of x [outer, row].
extern "C" __global__ void slice(const float* x, float* y, i64 outer, i64 chunk, i64 row, i64 from) {
    GRID_STRIDE(e, outer * chunk) { y[e] = x[(e / chunk) * row + from + e % chunk]; }
}
