# Everyday recipes. `just --list` shows them.

# Run the tests (the README's test command).
test:
    cargo test --workspace

# Everything CI runs.
ci:
    bash .ci/run

# The property tests with fresh random cases, CASES each (CI draws a fixed set, 24 to 256 each):
# minutes at 2,000; a failure is saved in the test's .proptest-regressions file to commit.
proptest-sweep CASES="2000":
    PROPTEST_CASES={{CASES}} cargo test --release -p sgc-plan --features optimal --test optimal --test plan_properties --test alloc --test csv_props
    PROPTEST_CASES={{CASES}} cargo test --release -p sgc-exec --test plan_fuzz
    PROPTEST_CASES={{CASES}} cargo test --release -p sgc-ir --test loader_props

# Format and lint (the public docs too: no broken or private links).
lint:
    cargo fmt --all
    cargo clippy --workspace --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# Rewrite graphs/ from the built-in model zoo (a test fails when they differ).
zoo:
    cargo run --release -- zoo --out graphs/

# Rewrite graphs/real/ from real PyTorch models (needs torch, torchvision, transformers; a few
# minutes; a test fails when they differ). Use the venv that CI uses, or set PYTHON.
real-corpus PYTHON="python3":
    cd python && {{PYTHON}} -m sgc_trace.tools.corpus --out ../graphs/real

# Inspect a graph: just inspect graphs/resnet50.json
inspect FILE:
    cargo run --release -- inspect {{FILE}}

# Benchmarks (release).
bench:
    cargo bench

# The planner benchmark; puts its search-speed table in docs/benchmarks.md.
scaling:
    PLANNER_MARKDOWN=target/scaling.md cargo bench --bench planner
    bash scripts/docs-section.sh docs/benchmarks.md scaling target/scaling.md "just scaling"

# The allocator benchmark's instance and scaling tables, into docs/benchmarks.md
# (SGC_DSA_EXTRA=DIR adds instances, e.g. minimalloc's benchmarks/challenging; see benches/alloc.rs).
alloc-table:
    ALLOC_MARKDOWN=target/alloc.md cargo bench --bench alloc -- dsa scaling real
    bash scripts/docs-section.sh docs/benchmarks.md alloc target/alloc.md "just alloc-table"

# Refresh the committed peak-memory baseline that CI checks (after a deliberate change).
baseline:
    cargo run --release -- compare graphs/*.json benches/data/checkmate/*.json --write-baseline benches/peak_memory.json

# Check peak memory against the committed baseline, as CI does.
check-memory:
    cargo run --release -- compare graphs/*.json benches/data/checkmate/*.json --check benches/peak_memory.json

# Regenerate the cheap generated sections of README.md and docs/ (the session, `sgc --help`,
# the peak-memory table) from the binary; `cargo test` fails when they are stale.
docs:
    SGC_BLESS=1 cargo test --test snapshots docs_sections

# The real corpus planned by every strategy beside MegEngine's search (reference results in
# benches/real_reference.json; refresh them with scripts/real-reference.sh); updates docs/benchmarks.md.
real:
    REAL_MARKDOWN=target/real.md cargo bench --bench real
    bash scripts/docs-section.sh docs/benchmarks.md real target/real.md "just real"

# Offload against recompute alone on ResNet-50, GPT-2 and ViT-B/16 (h100), into docs/benchmarks.md
offload:
    OFFLOAD_MARKDOWN=target/offload.md cargo bench --bench offload
    bash scripts/docs-section.sh docs/benchmarks.md offload target/offload.md "just offload"

# Run-time DTR: bookkeeping overhead on the CPU backend and the threshold sweep of
# MegEngine's guide (zoo ResNet-50, batch 200, 11 GB) beside the static plan; updates
# docs/benchmarks.md and docs/dtr_sweep.svg.
dtr:
    DTR_MARKDOWN=target/dtr.md DTR_SVG=docs/dtr_sweep.svg cargo bench --bench dtr
    bash scripts/docs-section.sh docs/benchmarks.md dtr target/dtr.md "just dtr"

# Every torchvision classification model (80) exported at batch 2, the ops the CPU backend
# lacks, and for the covered ones a none/sublinear/dtr step against the unplanned one
# (about an hour on 2 cores); the table into docs/benchmarks.md. Use the CI venv or set PYTHON.
torchvision PYTHON="python3":
    cargo build --release
    cd python && SGC_BIN=../target/release/sgc {{PYTHON}} bench/torchvision_sweep.py --run --out ../target/torchvision.md
    bash scripts/docs-section.sh docs/benchmarks.md torchvision target/torchvision.md "just torchvision"

# The same sweep in float64 (`model.double()`; the CPU backend computes every op in f64),
# compared with PyTorch's float64 step, where rounding cannot move a ReLU input across zero;
# the table into docs/benchmarks.md. ONLY: a comma-separated subset.
torchvision-f64 PYTHON="python3" ONLY="":
    cargo build --release
    cd python && SGC_BIN=../target/release/sgc {{PYTHON}} bench/torchvision_sweep.py --dtype float64 --run --only "{{ONLY}}" --out ../target/torchvision-f64.md
    bash scripts/docs-section.sh docs/benchmarks.md torchvision-f64 target/torchvision-f64.md "just torchvision-f64"

# PyTorch's OpInfo samples (op_db) of every op the executor runs, each sample a graph run on
# the CPU backend against PyTorch (about 10 minutes on 2 cores); the table into docs/ops.md.
# Use the CI venv (it has expecttest) or set PYTHON.
opinfo PYTHON="python3":
    cd python && {{PYTHON}} bench/opinfo_walk.py --out ../target/opinfo.md
    cd python && {{PYTHON}} bench/opinfo_walk.py --dtype bfloat16 --out ../target/opinfo-bf16.md
    cd python && {{PYTHON}} bench/opinfo_walk.py --dtype float16 --out ../target/opinfo-f16.md
    cd python && {{PYTHON}} bench/opinfo_walk.py --dtype float64 --out ../target/opinfo-f64.md
    bash scripts/docs-section.sh docs/ops.md opinfo target/opinfo.md "just opinfo"
    bash scripts/docs-section.sh docs/ops.md opinfo-bf16 target/opinfo-bf16.md "just opinfo"
    bash scripts/docs-section.sh docs/ops.md opinfo-f16 target/opinfo-f16.md "just opinfo"
    bash scripts/docs-section.sh docs/ops.md opinfo-f64 target/opinfo-f64.md "just opinfo"

# sgc plans applied in PyTorch (sgc_trace.compile) on six corpus models at small batches:
# measured beside sgc's prediction, and beside torch.compile's activation_memory_budget
# 0.1..0.9; updates docs/pytorch.md (CPU; about half an hour on 2 cores). Use the CI venv or set PYTHON.
vs-torch PYTHON="python3":
    cargo build --release
    cd python && SGC_BIN=../target/release/sgc {{PYTHON}} bench/vs_torch.py --out ../target/vs_torch.md
    bash scripts/docs-section.sh docs/pytorch.md vs-torch target/vs_torch.md "just vs-torch"

# What the GPU check carries to a GPU machine (target/gpu-carry: sgc and the CUDA tests built
# with --features cuda, the abi3 wheel).
gpu-prepare:
    bash scripts/gpu-prepare.sh

# The GPU check, on a machine with a GPU (README "GPU check"); `just gpu-check --dry-run` on the CPU.
gpu-check *ARGS:
    bash scripts/gpu-check.sh {{ARGS}}

# Tracing time per phase, CPU and CUDA fake tensors (GPT-2 small, ViT-B/16, BERT-base).
trace-time PYTHON="python3":
    {{PYTHON}} python/bench/trace_time.py
