#!/usr/bin/env bash
# Runs kael's test tiers, in order, stopping at the first failure.
#
#   bash scripts/test.sh                  everything CI runs (= full)
#   bash scripts/test.sh quick            fmt, clippy, rustdoc, the debug test suites, thumbv6m build
#   bash scripts/test.sh demos            release demos, benchmark smoke runs, the CLI in release, peer-bench clippy
#   bash scripts/test.sh peer             kael against candle-core (peer-bench --quick; not in full: it
#                                         builds candle in release, ~6 min, for a benchmark)
#   bash scripts/test.sh python           the Python bindings: pip install ./python into a venv, pytest
#   bash scripts/test.sh firmware         embedded builds, firmware clippy, every example under QEMU
#   bash scripts/test.sh reliability      Miri, fuzzing, ThreadSanitizer (scripts/reliability.sh)
#   bash scripts/test.sh full             quick demos python firmware reliability
#   bash scripts/test.sh quick demos      several groups, in the order given
#
# It installs what it needs itself (the two embedded targets, rustfmt,
# clippy, numpy in a venv under the target dir when pip refuses a user
# install), so it works from a clean clone on a fresh machine. CI runs it
# with no argument through .ci/run. README.md lists each group's time.
#
# Builds are shared: one target dir for the workspace ($CARGO_TARGET_DIR, or
# target/), and every debug-profile command of `quick` uses one of two
# feature sets, so cargo compiles each crate as few times as it can:
#
#   HOST_CUDA  --workspace --features kael-tests/cuda: kael-core with
#              sync+std+conformance (feature unification), kael-host with
#              cuda. The workspace's tests run once, in this set: it is a
#              superset of the default one (the CUDA code loads the driver at
#              run time, so it builds anywhere; without a driver every CUDA
#              test prints a SKIPPED line and passes).
#   HOST       --workspace: the same kael-core, kael-host without cuda. Only
#              clippy and rustdoc check it (the `not(feature = "cuda")`
#              code), and the release tiers of `demos` build it.
#
# kael-core is also tested on its own, because `--workspace` only ever sees
# it in Arc (`sync`) mode with `std` (kael-host turns both on): `-p kael-core
# --features conformance` is the default Rc mode (firmware's), with its doc
# tests; `-p kael-core --features sync --lib` is Arc mode without `std` (the
# global grad-mode flag), unit tests only (its doc tests are the same
# examples the workspace run already compiled in Arc mode).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# NOTE [Disk budget]: a full run once filled a CI machine's disk (the TSan
# build failed with "No space left on device" after 42 minutes). A run is
# one-shot, so incremental caches (2.3 GB in debug alone) buy nothing;
# debug builds carry line tables only (Cargo.toml); each group ends with a
# line of disk use; and when free space runs short, `make_room` deletes
# build directories no later group of this run reads.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

GROUPS_KNOWN=(quick demos python firmware reliability)
TARGETS=(thumbv6m-none-eabi thumbv7em-none-eabihf)

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

groups=()
if (($# == 0)); then
    groups=("${GROUPS_KNOWN[@]}")
fi
for arg in "$@"; do
    case "$arg" in
    full) groups+=("${GROUPS_KNOWN[@]}") ;;
    quick | demos | python | firmware | reliability | peer) groups+=("$arg") ;;
    -h | --help) usage; exit 0 ;;
    *)
        echo "scripts/test.sh: unknown tier group '$arg'; use one or more of: quick demos python firmware reliability peer full" >&2
        exit 2
        ;;
    esac
done
wants() { [[ " ${groups[*]} " == *" $1 "* ]]; }

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
# (tests/data/gpt2_reference.py), run with $KAEL_PYTHON. KAEL_REQUIRE_NUMPY=1
# makes that test fail, not skip, when python or numpy is missing, so the
# check cannot silently stop running. The order: a python3 that already has
# numpy; the venv a previous run made; `pip install --user`; a new venv under
# the target dir (for a system python that refuses user installs, PEP 668);
# Debian's python3-numpy (as root).
find_numpy_python() {
    local venv="$CARGO_TARGET_DIR/py-venv"
    local py
    for py in python3 "$venv/bin/python"; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c "import numpy" 2>/dev/null; then
            command -v "$py"
            return 0
        fi
    done
    command -v python3 >/dev/null 2>&1 || return 1
    echo "installing numpy (for the GPT-2 reference test)" >&2
    if python3 -m pip install --quiet --user numpy >&2 2>/dev/null && python3 -c "import numpy" 2>/dev/null; then
        command -v python3
        return 0
    fi
    echo "pip install --user was refused; making a venv in $venv" >&2
    if python3 -m venv "$venv" >&2 && "$venv/bin/python" -m pip install --quiet numpy >&2 &&
        "$venv/bin/python" -c "import numpy" 2>/dev/null; then
        echo "$venv/bin/python"
        return 0
    fi
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "trying Debian's python3-numpy" >&2
        if apt-get install -y --no-install-recommends python3-numpy >&2 && python3 -c "import numpy" 2>/dev/null; then
            command -v python3
            return 0
        fi
    fi
    return 1
}
if wants quick; then
    if KAEL_PYTHON="$(find_numpy_python)"; then
        export KAEL_PYTHON
        echo "numpy: $("$KAEL_PYTHON" -c 'import numpy; print(numpy.__version__)') ($KAEL_PYTHON)"
    else
        echo "warning: numpy could not be installed; the GPT-2 reference test will FAIL (KAEL_REQUIRE_NUMPY=1)" >&2
    fi
    export KAEL_REQUIRE_NUMPY="${KAEL_REQUIRE_NUMPY:-1}"
fi

echo "toolchain: $(rustc --version), $(cargo --version)"
echo "tier groups: ${groups[*]}; target dir: $CARGO_TARGET_DIR"

# ---------------------------------------------------------------- tiers

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

tiers_run=0
started=$SECONDS
declare -a TIMES=()

# tier NAME COMMAND...: prints a banner, runs COMMAND (its output also goes
# to $LOG, where the test counts and SKIPPED lines are read from), stops the
# script on failure.
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
    TIMES+=("$(printf '%5ss  %s' "$((SECONDS - t0))" "$name")")
    echo "== ok: $name ($((SECONDS - t0))s)"
}

# group NAME: a banner and the group's start time, for the summary.
group_t0=0
group_name=""
GROUP_TIMES=()
group_end() {
    if [[ -n "$group_name" ]]; then
        GROUP_TIMES+=("$(printf '%5ss  %s' "$((SECONDS - group_t0))" "$group_name")")
        disk_report "after group $group_name"
    fi
}

# shellcheck source=scripts/disk.sh
source scripts/disk.sh
group() {
    group_end
    group_name="$1"
    group_t0=$SECONDS
    echo
    echo "##################################################################"
    echo "## group: $1"
    echo "##################################################################"
}

HOST_CUDA=(--workspace --features kael-tests/cuda)

run_quick() {
    group quick
    tier "format" cargo fmt --all --check
    tier "layers: the foundation does not import the reference backend" bash scripts/check-layers.sh
    # The two crates outside the workspace (their own targets and dependencies).
    tier "format, firmware-examples" cargo fmt --manifest-path firmware-examples/Cargo.toml --check
    tier "format, peer-bench" cargo fmt --manifest-path peer-bench/Cargo.toml --check
    tier "clippy, workspace with cuda (kael-core in sync mode)" \
        cargo clippy "${HOST_CUDA[@]}" --all-targets -- -D warnings
    tier "clippy, workspace without cuda" \
        cargo clippy --workspace --all-targets -- -D warnings
    tier "clippy, kael-core Rc mode (and the conformance suite)" \
        cargo clippy -p kael-core --features conformance --all-targets -- -D warnings
    # Broken intra-doc links and other rustdoc warnings fail here.
    tier "rustdoc, workspace (warnings are errors)" \
        env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
    tier "tests, workspace with cuda (CUDA tests skip without a driver)" \
        cargo test "${HOST_CUDA[@]}"
    tier "tests, kael-core Rc mode (and the conformance suite's doctests)" \
        cargo test -p kael-core --features conformance
    tier "tests, kael-core sync (Arc) mode without std, unit tests" \
        cargo test -p kael-core --features sync --lib
    # Inference-only images build kael-core without `autograd` (NOTE
    # [Autograd feature]): lint that build and test what it promises.
    tier "clippy, kael-core without autograd" \
        cargo clippy -p kael-core --no-default-features --all-targets -- -D warnings
    tier "tests, kael-core without autograd and promotion (ops record nothing; mixed dtypes refused)" \
        cargo test -p kael-core --no-default-features --test without_autograd --test without_promotion
    tier "build, thumbv6m-none-eabi (Rc mode)" \
        cargo build -p kael-core --target thumbv6m-none-eabi
    # The examples `cargo test` just built (same features: nothing to compile).
    # (`cargo run` has no --workspace; with no -p it takes the workspace.)
    tier "demo" cargo run --features kael-tests/cuda --example demo
    tier "README example" cargo run --features kael-tests/cuda --example readme
    # Host MLP training with save/load: fails unless the loss falls tenfold
    # and the reloaded model reproduces it exactly.
    tier "example: train_mlp" cargo run --features kael-tests/cuda --example train_mlp
    # A host backend with one kernel and a device-memory backend with only
    # byte copies, each must pass the whole conformance suite.
    tier "example: custom_backend" cargo run --features kael-tests/cuda --example custom_backend
    tier "example: arena_sizing" cargo run --features kael-tests/cuda --example arena_sizing
}

run_demos() {
    group demos
    # Everything here is release, kael-host's default features: the release
    # profile is built once and shared by every tier of the group.
    # The main demo in CI mode: exits non-zero unless validation loss falls by at
    # least 10% and the reloaded checkpoint reproduces it exactly.
    tier "training demo, quick" cargo run --release -p kael-host --bin kael-train -- --quick
    # The same demo on the reference CPU backend (the default is the threaded one).
    tier "training demo, quick, reference CPU" \
        cargo run --release -p kael-host --bin kael-train -- --quick --device cpu
    # Benchmark smoke run (< 30 s): every figure of the benchmark table is
    # computed once, so the bench cannot rot. Figures are printed, never asserted.
    tier "benchmarks, quick" cargo run --release -p kael-host --bin kael-bench -- --quick
    # The `kael` CLI tests against the release binary without the cuda feature
    # (the debug run in `quick` has it on), so the "build with --features cuda"
    # message is tested too.
    tier "tests, kael CLI without cuda (release)" cargo test --release -p kael-host --test cli
    # kael against candle-core, same machine, same run (peer-bench/ is outside
    # the workspace so that candle stays out of every other build; it shares
    # the workspace's target directory). The quick run fails if the two
    # libraries disagree on the first step's loss or on a product.
    # Checked (so it cannot rot) but not run here: see `run_peer`.
    tier "clippy, peer-bench (kael vs candle-core)" \
        cargo clippy --release --manifest-path peer-bench/Cargo.toml --all-targets -- -D warnings
}

run_python() {
    group python
    # The kael-py crate (python/, outside the workspace: pyo3 needs an
    # interpreter to build) in a venv the script makes: fmt, clippy,
    # `pip install ./python` (release), the README's check and example, and
    # the pytest suite (its PyTorch cases skip, saying so, without torch).
    tier "python bindings: pip install ./python, pytest" bash scripts/python.sh
}

run_peer() {
    group peer
    # The candle comparison is a benchmark: its release build of candle-core
    # and a second kael is ~6 of CI's minutes, so `full` leaves it out and
    # this group runs it on request (before a benchmark table is updated).
    tier "peer benchmark, quick (kael vs candle-core)" \
        cargo run --release --manifest-path peer-bench/Cargo.toml -- --quick
}

run_firmware() {
    group firmware
    # kael-core alone for thumbv6m (Rc) is in `quick`; for thumbv7em in Rc,
    # sync and defmt mode scripts/firmware.sh builds it below (release, as
    # the examples' dependency), so only the conformance suite on a Cortex-M
    # target is built here.
    tier "build, thumbv7em-none-eabihf (sync mode, conformance suite)" \
        cargo build -p kael-core --target thumbv7em-none-eabihf --features sync,conformance
    # firmware-examples keeps its own target dir (scripts/firmware.sh too).
    tier "clippy, firmware-examples (thumbv7em-none-eabihf, with defmt)" \
        env CARGO_TARGET_DIR="$ROOT/firmware-examples/target" cargo clippy --release --manifest-path firmware-examples/Cargo.toml --target thumbv7em-none-eabihf --features defmt --bins -- -D warnings
    tier "clippy, firmware-examples (thumbv6m-none-eabi)" \
        env CARGO_TARGET_DIR="$ROOT/firmware-examples/target" cargo clippy --release --manifest-path firmware-examples/Cargo.toml --target thumbv6m-none-eabi --bins -- -D warnings
    # Installs qemu-system-arm (Debian) and llvm-tools if missing, builds
    # every example for Cortex-M4F/M0 and runs each under QEMU.
    tier "firmware under QEMU" bash scripts/firmware.sh
}

run_reliability() {
    group reliability
    # Miri (Rc and sync), libFuzzer targets (FUZZ_SECONDS each, default 60) and
    # ThreadSanitizer on the concurrency tests; installs nightly components and
    # cargo-fuzz itself, and skips a tier (saying why) when they cannot be had.
    tier "reliability: Miri, fuzzing, ThreadSanitizer" bash scripts/reliability.sh
}

disk_report "before the first group"
for g in "${groups[@]}"; do
    "run_$g"
    # When space runs short: `quick`'s debug builds and docs are read by no
    # other group, nor is the release build after `python` (only `peer`
    # reads it, and it rebuilds what it needs).
    case "$g" in
    quick) make_room debug doc ;;
    python) make_room release ;;
    esac
done
group_end

# --------------------------------------------------------------- summary

# Sum of every `test result:` line of the test tiers (unit, integration and
# doc tests; the core's tests count once per mode they ran in).
read -r passed failed < <(
    grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$LOG" |
        awk '{p += $4; f += $6} END {print p + 0, f + 0}'
)

# pytest's closing line ("297 passed, 3 skipped in 1.2s"): its counts join
# the total.
read -r py_passed py_failed < <(
    grep -E '^=*\s*[0-9]+ (passed|failed)' "$LOG" | tail -1 |
        awk '{for (i = 2; i <= NF; i++) { if ($i ~ /^passed/) p = $(i-1); if ($i ~ /^failed/) f = $(i-1) }} END {print p + 0, f + 0}'
)
passed=$((passed + py_passed))
failed=$((failed + py_failed))

echo
echo "time per tier:"
printf '%s\n' "${TIMES[@]}"
echo "time per group:"
printf '%s\n' "${GROUP_TIMES[@]}"
# Tests that could not run their check say so on a line starting SKIPPED
# (written past the test harness's output capture, so they show; the CUDA
# cases once per test binary).
skipped="$(grep -E '^SKIPPED ' "$LOG" | sort | uniq -c || true)"
if [[ -n "$skipped" ]]; then
    echo "checks skipped (passed without running; count and reason):"
    echo "$skipped"
fi
echo
echo "all $tiers_run tiers of '${groups[*]}' passed in $((SECONDS - started))s"
echo "tests: $passed passed, $failed failed"
