# Everyday recipes. `just --list` shows them.

# Run the tests (the README's test command).
test:
    cargo test --workspace

# Everything CI runs.
ci:
    bash .ci/run

# Format and lint.
lint:
    cargo fmt --all
    cargo clippy --workspace --all-targets -- -D warnings

# Rewrite graphs/ from the built-in model zoo (a test fails when they differ).
zoo:
    cargo run --release -- zoo --out graphs/

# Inspect a graph: just inspect graphs/resnet50.json
inspect FILE:
    cargo run --release -- inspect {{FILE}}

# Benchmarks (release).
bench:
    cargo bench
