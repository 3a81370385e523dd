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
