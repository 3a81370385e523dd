// Convolution helpers (im2col / col2im around cuBLAS) over [N, C, H, W]
// (cpu_backend/conv.rs). A window is (c, h, w, kh, kw, stride, pad_h, pad_w, ho, wo).

// Unfolds `images` images of x [*, C, H, W] into col [images, C*kh*kw, Ho*Wo] (0 for padding).
extern "C" __global__ void im2col(const float* x, float* col, i64 images, i64 c, i64 h, i64 w,
                                  i64 kh, i64 kw, i64 stride, i64 pad_h, i64 pad_w, i64 ho,
                                  i64 wo) {
    i64 cols = ho * wo, rows = c * kh * kw;
    GRID_STRIDE(e, images * rows * cols) {
        i64 q = e % cols, row = (e / cols) % rows, img = e / (cols * rows);
        i64 oi = q / wo, oj = q % wo;
        i64 kj = row % kw, ki = (row / kw) % kh, ch = row / (kw * kh);
        i64 si = window_src(oi, ki, stride, pad_h, h), sj = window_src(oj, kj, stride, pad_w, w);
        col[e] = (si >= 0 && sj >= 0) ? x[((img * c + ch) * h + si) * w + sj] : 0.0f;
    }
}

// Folds col [images, C*kh*kw, Ho*Wo] back onto dx [images, C, H, W]: each dx element gathers
// its taps in (ki, kj) order, the order in which the CPU reference adds them.
extern "C" __global__ void col2im(const float* col, float* dx, i64 images, i64 c, i64 h, i64 w,
                                  i64 kh, i64 kw, i64 stride, i64 pad_h, i64 pad_w, i64 ho,
                                  i64 wo) {
    i64 cols = ho * wo, rows = c * kh * kw;
    GRID_STRIDE(e, images * c * h * w) {
        i64 j = e % w, i = (e / w) % h, ch = (e / (w * h)) % c, img = e / (w * h * c);
        float s = 0.0f;
        for (i64 ki = 0; ki < kh; ki++) {
            i64 ti = i + pad_h - ki;
            if (ti < 0 || ti % stride != 0 || ti / stride >= ho) continue;
            for (i64 kj = 0; kj < kw; kj++) {
                i64 tj = j + pad_w - kj;
                if (tj < 0 || tj % stride != 0 || tj / stride >= wo) continue;
                i64 row = (ch * kh + ki) * kw + kj;
                s += col[(img * rows + row) * cols + (ti / stride) * wo + tj / stride];
            }
        }
        dx[e] = s;
    }
}
