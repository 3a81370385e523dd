//! Geometry of a 2-d sliding window over `[N, C, H, W]`, shared by the convolution and
//! pooling kernels of every backend (a backend adds its own methods beside these).

/// Sizes of a convolution or pooling window and of its output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    /// Padding of the rows and of the columns.
    pub pad: [usize; 2],
    pub ho: usize,
    pub wo: usize,
}

impl Window {
    /// A convolution with image `x [N, C, H, W]`, weight `w [O, C, kh, kw]` and output
    /// `y [N, O, Ho, Wo]`.
    pub(crate) fn conv(
        x: &[usize],
        w: &[usize],
        y: &[usize],
        stride: usize,
        pad: [usize; 2],
    ) -> Self {
        Window {
            n: x[0],
            c: x[1],
            h: x[2],
            w: x[3],
            kh: w[2],
            kw: w[3],
            stride,
            pad,
            ho: y[2],
            wo: y[3],
        }
    }

    /// A `k x k` pooling window from `x [N, C, H, W]` to `y [N, C, Ho, Wo]`.
    pub(crate) fn pool(x: &[usize], y: &[usize], k: usize, stride: usize, pad: usize) -> Self {
        Self::conv(x, &[0, 0, k, k], y, stride, [pad, pad])
    }

    /// Elements of one image, `C * H * W`.
    pub(crate) fn image(&self) -> usize {
        self.c * self.h * self.w
    }

    /// Rows of the im2col matrix: one per input channel and kernel tap.
    pub(crate) fn col_rows(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Columns of the im2col matrix: one per output position.
    pub(crate) fn col_cols(&self) -> usize {
        self.ho * self.wo
    }
}

/// A grouped convolution: the whole window `g` with `o` output channels in `groups`
/// groups, and one group's input and output channels, its window (the group's channels),
/// the input and output plane sizes and its slice of the weight.
pub(crate) struct Groups {
    pub g: Window,
    pub o: usize,
    pub groups: usize,
    pub cg: usize,
    pub og: usize,
    pub gw: Window,
    pub pin: usize,
    pub pout: usize,
    pub wlen: usize,
}

impl Groups {
    pub(crate) fn of(g: &Window, o: usize, groups: usize) -> Groups {
        let (cg, og) = (g.c / groups, o / groups);
        Groups {
            g: *g,
            o,
            groups,
            cg,
            og,
            gw: Window { c: cg, ..*g },
            pin: g.h * g.w,
            pout: g.ho * g.wo,
            wlen: og * cg * g.kh * g.kw,
        }
    }

    /// The input side's channels: (all, per group, plane size).
    pub(crate) fn inputs(&self) -> (usize, usize, usize) {
        (self.g.c, self.cg, self.pin)
    }

    /// The output side's channels: (all, per group, plane size).
    pub(crate) fn outputs(&self) -> (usize, usize, usize) {
        (self.o, self.og, self.pout)
    }
}
