// Sums and means over contiguous axes (cpu_backend/reduce.rs).

// x viewed as [outer, red, inner]: one thread per output element sums its `red` values in
// order, in f64, as the CPU reference does.
extern "C" __global__ void reduce_sum(const float* x, float* y, i64 outer, i64 red, i64 inner,
                                      int mean) {
    GRID_STRIDE(e, outer * inner) {
        i64 o = e / inner, i = e % inner;
        double s = 0.0;
        for (i64 r = 0; r < red; r++) s += (double)x[(o * red + r) * inner + i];
        y[e] = (float)(mean ? s / (double)red : s);
    }
}

// Over axes that are not adjacent: output element e starts at the kept axes' offset
// (`kept`: the kept axes' lengths and strides in x), and sums the `red` values (`reduced`:
// the reduced axes' lengths and strides) in row-major order of the reduced axes, in f64.
extern "C" __global__ void reduce_sum_strided(const float* x, float* y, i64 outputs, i64 red,
                                              int mean, Dims kept, Dims reduced) {
    GRID_STRIDE(e, outputs) {
        i64 base = strided_offset(e, kept);
        double s = 0.0;
        for (i64 r = 0; r < red; r++) s += (double)x[base + strided_offset(r, reduced)];
        y[e] = (float)(mean ? s / (double)red : s);
    }
}
