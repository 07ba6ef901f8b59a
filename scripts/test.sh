#!/usr/bin/env bash
# Runs every test tier of kael, in order, stopping at the first failure.
#
#   bash scripts/test.sh        (from any directory)
#
# It installs what it needs itself (the two embedded targets, rustfmt and
# clippy), so it works from a clean clone on a fresh machine. CI runs it
# through .ci/run.
#
# Why kael-core is tested on its own as well as in the workspace: cargo
# unifies features across the packages it builds together, and kael-host
# depends on kael-core with `sync`. So `cargo test --workspace` and
# `cargo clippy --workspace` only ever see kael-core in Arc (`sync`) mode.
# The `-p kael-core` runs below are the ones that exercise the default Rc
# mode, and `--features sync` on its own is the Arc mode without the other
# crates. The embedded builds use `-p kael-core` for the same reason.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGETS=(thumbv6m-none-eabi thumbv7em-none-eabihf)

# --------------------------------------------------------------- set-up

if command -v rustup >/dev/null 2>&1; then
    installed_targets="$(rustup target list --installed)"
    missing=()
    for t in "${TARGETS[@]}"; do
        if ! grep -qx "$t" <<<"$installed_targets"; then
            missing+=("$t")
        fi
    done
    if ((${#missing[@]})); then
        echo "installing rust targets: ${missing[*]}"
        rustup target add "${missing[@]}"
    fi
    installed_components="$(rustup component list --installed)"
    for c in rustfmt clippy; do
        if ! grep -q "^$c" <<<"$installed_components"; then
            echo "installing rust component: $c"
            rustup component add "$c"
        fi
    done
else
    echo "warning: rustup not found; assuming ${TARGETS[*]}, rustfmt and clippy are installed" >&2
fi

# numpy: the GPT-2 test compares logits against an independent numpy forward
# (tests/data/gpt2_reference.py).
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import numpy" 2>/dev/null; then
    echo "installing numpy (for the GPT-2 reference test)"
    python3 -m pip install --quiet numpy || echo "warning: numpy could not be installed; the GPT-2 reference test will skip" >&2
fi

echo "toolchain: $(rustc --version), $(cargo --version)"

# ---------------------------------------------------------------- tiers

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

tiers_run=0
started=$SECONDS

# tier NAME COMMAND...: prints a banner, runs COMMAND (its output also goes
# to $LOG, where the test counts are read from), stops the script on failure.
tier() {
    local name="$1"
    shift
    local t0=$SECONDS
    echo
    echo "=================================================================="
    echo "== tier: $name"
    echo "== \$ $*"
    echo "=================================================================="
    local status=0
    "$@" 2>&1 | tee -a "$LOG" || status=$?
    if ((status != 0)); then
        echo
        echo "FAILED tier: $name (exit $status) after $((SECONDS - started))s"
        exit "$status"
    fi
    tiers_run=$((tiers_run + 1))
    echo "== ok: $name ($((SECONDS - t0))s)"
}

tier "format" cargo fmt --all --check
# The two crates outside the workspace (their own targets and dependencies).
tier "format, firmware-examples" cargo fmt --manifest-path firmware-examples/Cargo.toml --check
tier "format, peer-bench" cargo fmt --manifest-path peer-bench/Cargo.toml --check
tier "clippy, workspace (kael-core in sync mode)" \
    cargo clippy --workspace --all-targets -- -D warnings
tier "clippy, kael-core Rc mode (and the conformance suite)" \
    cargo clippy -p kael-core --features conformance --all-targets -- -D warnings
tier "clippy, kael-core sync mode" \
    cargo clippy -p kael-core --features sync --all-targets -- -D warnings
tier "tests, workspace" cargo test --workspace
tier "tests, kael-core Rc mode (and the conformance suite's doctests)" \
    cargo test -p kael-core --features conformance
tier "tests, kael-core sync (Arc) mode" cargo test -p kael-core --features sync
tier "build, thumbv6m-none-eabi (Rc mode)" \
    cargo build -p kael-core --target thumbv6m-none-eabi
tier "build, thumbv7em-none-eabihf (Rc mode)" \
    cargo build -p kael-core --target thumbv7em-none-eabihf
tier "build, thumbv7em-none-eabihf (sync mode, conformance suite)" \
    cargo build -p kael-core --target thumbv7em-none-eabihf --features sync,conformance
tier "check, defmt on thumbv7em-none-eabihf" \
    cargo check -p kael-core --features defmt --target thumbv7em-none-eabihf
tier "clippy, firmware-examples (thumbv7em-none-eabihf, with defmt)" \
    cargo clippy --release --manifest-path firmware-examples/Cargo.toml --target thumbv7em-none-eabihf --features defmt --bins -- -D warnings
tier "clippy, firmware-examples (thumbv6m-none-eabi)" \
    cargo clippy --release --manifest-path firmware-examples/Cargo.toml --target thumbv6m-none-eabi --bins -- -D warnings
tier "clippy, with the cuda feature" \
    cargo clippy --workspace --all-targets --features kael-tests/cuda -- -D warnings
# Without a driver every CUDA test prints one "skipped: no CUDA driver found" line and passes.
tier "tests, cuda feature (skip without a GPU)" \
    cargo test -p kael-tests --features cuda --test cuda
tier "tests, kael-host with the cuda feature" cargo test -p kael-host --features cuda
tier "demo" cargo run -p kael-host --example demo
tier "README example" cargo run -p kael-host --example readme
# The main demo in CI mode: exits non-zero unless validation loss falls by at
# least 10% and the reloaded checkpoint reproduces it exactly.
tier "training demo, quick" cargo run --release -p kael-host --bin kael-train -- --quick
# The same demo on the reference CPU backend (the default is the threaded one).
tier "training demo, quick, reference CPU" \
    cargo run --release -p kael-host --bin kael-train -- --quick --device cpu
# Benchmark smoke run (< 30 s): every figure of the benchmark table is
# computed once, so the bench cannot rot. Figures are printed, never asserted.
tier "benchmarks, quick" cargo run --release -p kael-host --bin kael-bench -- --quick
# kael against candle-core, same machine, same run (peer-bench/ is outside
# the workspace so that candle stays out of every other build; it shares
# the workspace's target directory). The quick run fails if the two
# libraries disagree on the first step's loss or on a product.
tier "clippy, peer-bench (kael vs candle-core)" \
    env CARGO_TARGET_DIR="$PWD/target" cargo clippy --release --manifest-path peer-bench/Cargo.toml --all-targets -- -D warnings
tier "peer benchmark, quick (kael vs candle-core)" \
    env CARGO_TARGET_DIR="$PWD/target" cargo run --release --manifest-path peer-bench/Cargo.toml -- --quick
# Firmware: installs qemu-system-arm (Debian) and llvm-tools if missing,
# builds every example for Cortex-M4F/M0 and runs each under QEMU.
tier "firmware under QEMU" bash scripts/firmware.sh
# Miri (Rc and sync), libFuzzer targets (FUZZ_SECONDS each, default 60) and
# ThreadSanitizer on the concurrency tests; installs nightly components and
# cargo-fuzz itself, and skips a tier (saying why) when they cannot be had.
tier "reliability: Miri, fuzzing, ThreadSanitizer" bash scripts/reliability.sh

# --------------------------------------------------------------- summary

# Sum of every `test result:` line of the test tiers (unit, integration and
# doc tests; the core's tests count once per mode they ran in).
read -r passed failed < <(
    grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$LOG" |
        awk '{p += $4; f += $6} END {print p + 0, f + 0}'
)

echo
echo "all $tiers_run tiers passed in $((SECONDS - started))s (test counts summed over the 3 test tiers)"
echo "tests: $passed passed, $failed failed"
