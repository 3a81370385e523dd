// Data movement: transpose, concat, slice, reshape copies (cpu_backend/shape.rs).

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

// gather along an axis, elements of `words` 4-byte words (f32: 1, i64: 2): output
// element e of y [outer, taken, inner] = x [outer, len, inner] at (o, ids[e], i); an
// index outside 0..len sets the error flag and gives zero words.
extern "C" __global__ void gather(const float* x, const void* ids, int idx64, float* y, i64 n,
                                  i64 taken, i64 len, i64 inner, int words, int* err) {
    GRID_STRIDE(w, n * words) {
        i64 e = w / words, part = w % words;
        i64 o = e / (taken * inner), i = e % inner;
        i64 at = load_index(ids, idx64, e);
        if (at < 0 || at >= len) {
            *err = 1;
            y[w] = 0.0f;
        } else {
            y[w] = x[((o * len + at) * inner + i) * words + part];
        }
    }
}

// slice_scatter's second half (the first copies x into y): src [outer, count, inner] over
// positions start, start + step, ... of the middle axis of y [outer, len, inner].
extern "C" __global__ void slice_scatter_into(const float* src, float* y, i64 outer, i64 count,
                                              i64 inner, i64 len, i64 start, i64 step) {
    GRID_STRIDE(e, outer * count * inner) {
        i64 i = e % inner, k = (e / inner) % count, o = e / (inner * count);
        y[(o * len + start + k * step) * inner + i] = src[e];
    }
}

// constant_pad_nd and roll: y [geo.out_shape] at index i reads x at i - offset along each
// axis (x's lengths and offsets in `shift`: out_shape and src_strides; x's strides in
// geo.src_strides); with `wrap` the index wraps around x's length (roll), else an index
// outside x reads `value` (pad; a negative offset crops).
extern "C" __global__ void shifted(const float* x, float* y, float value, int wrap, i64 n, Dims geo,
                                   Dims shift) {
    GRID_STRIDE(e, n) {
        i64 rest = e, src = 0;
        bool inside = true;
        for (i64 a = geo.rank - 1; a >= 0; a--) {
            i64 len = geo.out_shape[a], xlen = shift.out_shape[a];
            i64 s = rest % len - shift.src_strides[a];
            rest /= len;
            if (wrap) {
                s = ((s % xlen) + xlen) % xlen;
            } else if (s < 0 || s >= xlen) {
                inside = false;
            }
            src += s * geo.src_strides[a];
        }
        y[e] = inside ? x[src] : value;
    }
}

// `transpose` over single bytes (bool and u8 tensors): y at output index (i_0..i_r) = x at
// sum_k i_k * src_strides[k].
extern "C" __global__ void transpose_bytes(const unsigned char* x, unsigned char* y, i64 n,
                                           Dims dims) {
    GRID_STRIDE(e, n) { y[e] = x[strided_offset(e, dims)]; }
}
