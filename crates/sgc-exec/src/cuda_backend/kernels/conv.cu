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
            i64 oi = window_dst(i, ki, stride, pad_h, ho);
            if (oi < 0) continue;
            for (i64 kj = 0; kj < kw; kj++) {
                i64 oj = window_dst(j, kj, stride, pad_w, wo);
                if (oj < 0) continue;
                i64 row = (ch * kh + ki) * kw + kj;
                s += col[(img * rows + row) * cols + oi * wo + oj];
            }
        }
        dx[e] = s;
    }
}

// Grouped convolution without im2col, for groups of few channels (depthwise: one): one
// launch for all groups, where the im2col path runs a gather, an im2col, a product and a
// placement per group. x [N, C, H, W], w [O, C/groups, kh, kw], y [N, O, Ho, Wo]; each
// output sums its (channel, ki, kj) taps in that order in f64 and rounds once, as the CPU
// reference's product does.
extern "C" __global__ void conv_direct(const float* x, const float* wt, float* y, i64 images,
                                       i64 c, i64 h, i64 w, i64 kh, i64 kw, i64 stride,
                                       i64 pad_h, i64 pad_w, i64 ho, i64 wo, i64 o,
                                       i64 groups) {
    i64 cg = c / groups, og = o / groups;
    GRID_STRIDE(e, images * o * ho * wo) {
        i64 oj = e % wo, oi = (e / wo) % ho, oc = (e / (wo * ho)) % o, img = e / (wo * ho * o);
        const float* xs = x + (img * c + (oc / og) * cg) * h * w;
        const float* ws = wt + oc * cg * kh * kw;
        double s = 0.0;
        for (i64 ci = 0; ci < cg; ci++) {
            for (i64 ki = 0; ki < kh; ki++) {
                i64 si = window_src(oi, ki, stride, pad_h, h);
                if (si < 0) continue;
                for (i64 kj = 0; kj < kw; kj++) {
                    i64 sj = window_src(oj, kj, stride, pad_w, w);
                    if (sj < 0) continue;
                    s += (double)xs[(ci * h + si) * w + sj] * (double)ws[(ci * kh + ki) * kw + kj];
                }
            }
        }
        y[e] = (float)s;
    }
}

// The input gradient of `conv_direct`: dx [N, C, H, W] from dy [N, O, Ho, Wo] and the
// weight; each element sums, in f64, over its group's output channels and the taps that
// read it.
extern "C" __global__ void conv_direct_grad_input(const float* dy, const float* wt, float* dx,
                                                  i64 images, i64 c, i64 h, i64 w, i64 kh,
                                                  i64 kw, i64 stride, i64 pad_h, i64 pad_w,
                                                  i64 ho, i64 wo, i64 o, i64 groups) {
    i64 cg = c / groups, og = o / groups;
    GRID_STRIDE(e, images * c * h * w) {
        i64 j = e % w, i = (e / w) % h, ch = (e / (w * h)) % c, img = e / (w * h * c);
        i64 grp = ch / cg, ci = ch % cg;
        double s = 0.0;
        for (i64 q = 0; q < og; q++) {
            i64 oc = grp * og + q;
            const float* dys = dy + (img * o + oc) * ho * wo;
            const float* ws = wt + (oc * cg + ci) * kh * kw;
            for (i64 ki = 0; ki < kh; ki++) {
                i64 oi = window_dst(i, ki, stride, pad_h, ho);
                if (oi < 0) continue;
                for (i64 kj = 0; kj < kw; kj++) {
                    i64 oj = window_dst(j, kj, stride, pad_w, wo);
                    if (oj < 0) continue;
                    s += (double)dys[oi * wo + oj] * (double)ws[ki * kw + kj];
                }
            }
        }
        dx[e] = (float)s;
    }
}

// The weight gradient of `conv_direct`: one block per weight element [oc, ci, ki, kj], its
// threads over (image, output position), summed in f64 through the fixed-order block tree.
extern "C" __global__ void conv_direct_grad_weight(const float* x, const float* dy, float* dw,
                                                   i64 images, i64 c, i64 h, i64 w, i64 kh,
                                                   i64 kw, i64 stride, i64 pad_h, i64 pad_w,
                                                   i64 ho, i64 wo, i64 o, i64 groups) {
    __shared__ double sh[BLOCK];
    i64 cg = c / groups, og = o / groups, taps = kh * kw, plane = ho * wo;
    ROWS(r, o * cg * taps) {
        i64 kj = r % kw, ki = (r / kw) % kh, ci = (r / taps) % cg, oc = r / (taps * cg);
        i64 ch = (oc / og) * cg + ci;
        double s = 0.0;
        BLOCK_STRIDE(p, images * plane) {
            i64 img = p / plane, q = p % plane;
            i64 si = window_src(q / wo, ki, stride, pad_h, h);
            i64 sj = window_src(q % wo, kj, stride, pad_w, w);
            if (si >= 0 && sj >= 0)
                s += (double)dy[(img * o + oc) * plane + q] *
                     (double)x[((img * c + ch) * h + si) * w + sj];
        }
        s = block_sum(s, sh);
        if (threadIdx.x == 0) dw[r] = (float)s;
    }
}
