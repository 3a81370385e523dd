//! The Core ATen op types the executor leaves out on purpose, with the reason its
//! refusal and `sgc inspect --device` give (a leaf module: errors and coverage read it).

/// Op types of PyTorch's Core ATen opset that the executor leaves out on purpose, and why:
/// `sgc inspect --device` and the executor's refusal give the reason. The exporter
/// decomposes what it can before an op reaches this list (python/sgc_trace/exporter/decompose.py).
pub const LEFT_OUT: &[(&str, &str)] = &[
    ("aten._local_scalar_dense.default", "it reads a value into the program (`.item()`): a static graph has no data-dependent control flow; keep the value a tensor"),
    ("aten.nonzero.default", "its output's shape depends on the values (a static graph fixes every shape before the step)"),
    ("aten.masked_select.default", "its output's shape depends on the values"),
    ("aten.unique_dim.default", "its output's shape depends on the values"),
    ("aten.resize_.default", "it changes a tensor's shape in place (shapes are fixed before the step)"),
    ("aten._fft_r2c.default", "complex tensors are not held by the executor"),
    ("aten._fft_c2r.default", "complex tensors are not held by the executor"),
    ("aten._fft_c2c.default", "complex tensors are not held by the executor"),
    ("aten._cdist_forward.default", "not seen in a traced training step yet; trace `torch.cdist` with compute_mode='use_mm_for_euclid_dist' to get matrix products"),
    ("aten._pdist_forward.default", "not seen in a traced training step yet"),
];

/// `": left out on purpose: {reason}"` for an op type of [`LEFT_OUT`], else empty.
pub fn why_left_out(op_type: &str) -> String {
    LEFT_OUT
        .iter()
        .find(|(t, _)| *t == op_type)
        .map(|(_, why)| format!(": left out on purpose: {why}"))
        .unwrap_or_default()
}
