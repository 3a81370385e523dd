// Random draws (cpu_backend/random.rs): SplitMix64 is a counter-based stream, draw `i`
// (from 0) of the stream seeded `s` being mix(s + (i + 1) * GOLDEN), so every element is
// drawn independently and equals the CPU reference's sequential draw.

#define GOLDEN 0x9E3779B97F4A7C15ULL

__device__ unsigned long long splitmix_at(unsigned long long state, i64 i) {
    unsigned long long z = state + (unsigned long long)(i + 1) * GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Whether draw `i` keeps: its 53 high bits below `below` (= ceil(p * 2^53): u < p exactly).
__device__ bool draw_below(i64 state, i64 i, i64 below) {
    return (i64)(splitmix_at((unsigned long long)state, i) >> 11) < below;
}

// Ones with probability p.
extern "C" __global__ void bernoulli(float* y, i64 state, i64 below, i64 n) {
    GRID_STRIDE(i, n) { y[i] = draw_below(state, i, below) ? 1.0f : 0.0f; }
}

// x * keep * scale and the bool mask `keep`.
extern "C" __global__ void dropout(const float* x, float* y, unsigned char* mask, i64 state, i64 below,
                                   float scale, i64 n) {
    GRID_STRIDE(i, n) {
        float k = draw_below(state, i, below) ? 1.0f : 0.0f;
        y[i] = x[i] * k * scale;
        mask[i] = k != 0.0f;
    }
}

// (dy, mask) -> dy * scale where the mask is set, else 0.
extern "C" __global__ void dropout_backward(const float* dy, const unsigned char* mask, float* dx,
                                            float scale, i64 n) {
    GRID_STRIDE(i, n) { dx[i] = mask[i] ? dy[i] * scale : 0.0f; }
}

// x * mask, the mask promoted to 1.0 or 0.0 (as PyTorch multiplies).
extern "C" __global__ void mask_mul(const float* x, const unsigned char* mask, float* y, i64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] * (mask[i] ? 1.0f : 0.0f); }
}
