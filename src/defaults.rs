//! Every default the command line shows, declared once, and shared with the Python
//! bindings (`crates/sgc-py`), so `sgc.plan(...)` and `sgc plan` make the same plan. The
//! planner's knobs come from the library (`PlanOptions::default()`), so `sgc plan`,
//! `sgc fit`, `sgc compare` and `sgc inspect` agree with it and with each other. One
//! exception, on purpose: the genetic refinement. The library's default is 0 (a caller
//! asks for the search it pays for); the command line refines for [`GENETIC_ITERS`]
//! generations, the setting every table in docs/ uses and the one users were told to type.

use crate::plan::streams::HostLink;
use crate::plan::{PlanOptions, Strategy};

/// The command-line flag of a `PlanOptions` field (its Python keyword): `genetic_iters`
/// is `--genetic-iters`, `time_limit_s` is `--time-limit`.
pub fn flag_of(field: &str) -> String {
    let name = field.strip_suffix("_s").unwrap_or(field);
    format!("--{}", name.replace('_', "-"))
}

/// Generations of genetic refinement of `sgc plan`, `sgc fit` and `sgc compare`.
pub const GENETIC_ITERS: usize = 20;

/// The device profile whose roofline the Python exporter writes as each op's `time_us`
/// when none is named (`sgc_trace.export(device_profile=...)`, `sgc-trace --device-profile`).
pub const DEVICE_PROFILE: &str = "a100";

/// The largest input file read (the library's limit, 4 GiB).
pub const MAX_INPUT: u64 = crate::ir::file::DEFAULT_MAX_INPUT_BYTES;

/// Planner worker threads accepted by `--workers`.
pub const WORKERS: std::ops::RangeInclusive<u64> = 1..=1024;

/// Arena alignment in bytes (CUDA allocators hand out 256-byte aligned blocks).
pub const ALIGN: u64 = crate::plan::DEFAULT_ALIGN;

pub fn thresh_tries() -> usize {
    PlanOptions::default().thresh_tries
}

pub fn pool_size() -> usize {
    PlanOptions::default().pool_size
}

pub fn seed() -> u64 {
    PlanOptions::default().seed
}

pub fn evictee_min_size() -> u64 {
    PlanOptions::default().evictee_min_size
}

/// The strategies `sgc fit` searches when none are named, in this order.
pub const FIT_STRATEGIES: [Strategy; 3] = [Strategy::None, Strategy::ChenSqrt, Strategy::Sublinear];

/// The most a plan `sgc fit` accepts may recompute, as a share of one step's cost: a batch
/// trained several times slower is rarely what the user asks for (`--max-recompute none`
/// lifts it).
pub const FIT_MAX_RECOMPUTE: f64 = 1.0 / 3.0;

/// `--max-recompute`'s default as the command line shows it.
pub const FIT_MAX_RECOMPUTE_TEXT: &str = "1/3";

/// The options with offload turned on where it can apply: a budget, a strategy that
/// offloads (`Strategy::can_offload`: sublinear, partition), a host link (`host_link`, else the device profile's),
/// and `offload` allowed. Everywhere else the options stay as they were before offload
/// (`sgc plan --no-offload` and `sgc.plan(offload=False)`: byte-identical plans).
pub fn with_offload(
    options: PlanOptions,
    host_link: Option<HostLink>,
    host_memory: Option<u64>,
    offload: bool,
) -> PlanOptions {
    let link = host_link.or_else(|| {
        options
            .device_profile
            .as_ref()
            .and_then(|d| HostLink::named(d.name()))
    });
    let applies = options.budget.is_some()
        && crate::plan::strategies::of(options.strategy).can_offload()
        && offload;
    PlanOptions {
        host_link: link.filter(|_| applies),
        host_memory: host_memory.filter(|_| applies),
        ..options
    }
}
