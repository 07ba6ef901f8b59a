#!/usr/bin/env bash
# Reliability tiers of kael, on the nightly toolchain:
#
#   miri  the core's unit tests in Rc and `sync` mode, and a few kael-tests
#         integration tests, under Miri (undefined behaviour, leaks, data
#         races of Miri's thread scheduler); the thread tests again with
#         each seed of MIRI_SEEDS, so other interleavings are explored;
#   fuzz  each cargo-fuzz target in fuzz/ for FUZZ_SECONDS (libFuzzer),
#         failing on any crash, panic, leak or timeout;
#   tsan  the thread tests (tests/tests/concurrency.rs) under ThreadSanitizer.
#
#   bash scripts/reliability.sh                  (from any directory)
#   FUZZ_SECONDS=300 bash scripts/reliability.sh (longer fuzzing; default 60)
#   RELIABILITY_TIERS="fuzz" bash scripts/...    (a subset of: miri fuzz tsan)
#   KAEL_NIGHTLY=nightly-2026-05-19 ...          (pin the nightly; default nightly)
#   MIRI_SEEDS="1 2 3 4 5 6" bash scripts/...    (scheduler seeds for the thread
#                                                tests under Miri; default "1 2")
#
# It installs what it needs itself (the nightly toolchain, its miri and
# rust-src components, cargo-fuzz from crates.io). A tier whose tools
# cannot be installed is SKIPPED with a message saying why; a tier that
# runs and finds a problem FAILS, and the script exits non-zero. Fuzzing
# inputs that crash are left in fuzz/artifacts/<target>/ (reproduce with
# `cd fuzz && cargo +nightly fuzz run <target> <file>`); turn each into a
# regression test in tests/tests/fuzz_regressions.rs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_JOBS="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
TIERS="${RELIABILITY_TIERS:-miri fuzz tsan}"
NIGHTLY="${KAEL_NIGHTLY:-nightly}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_DIR="$TARGET_DIR"
# shellcheck source=scripts/disk.sh
source scripts/disk.sh

# Strict provenance: no integer-to-pointer casts (the core has none), so
# Miri can check every pointer. Extra flags can come from $MIRIFLAGS.
export MIRIFLAGS="-Zmiri-strict-provenance ${MIRIFLAGS:-}"
# Miri cannot run libm's inline-asm sqrt/fma: use its portable versions.
SOFT_FLOATS="libm/force-soft-floats"
# NOTE [Miri runs the unsafe code]: Miri is here for the unsafe code (every
# `unsafe` has a test that reaches it) and for the thread tests'
# interleavings. A unit test that sweeps thousands of values through safe
# arithmetic only (int8 dequantization against TFLite's formula, fixed-point
# multipliers, the normal sampler's moments, broadcast index walks) is
# `#[cfg_attr(miri, ignore)]`: Miri lists it as ignored, and `cargo test`
# runs it natively. One of them alone took 317 s of this tier.
# kael-tests integration tests run under Miri (the others are slow there:
# gradcheck, matmul and reduce sweep many shapes through the interpreter).
MIRI_TESTS=(smoke fuzz_regressions bad_input_matrix concurrency fault_injection index)
# The thread tests run once more per seed (the run above is seed 0): Miri's
# scheduler is deterministic per seed, so each seed is another set of
# interleavings and weak-memory outcomes. Each seed costs one run of the
# 9 thread tests under Miri (about 4.5 min on 2 busy cores, no rebuild);
# two extra seeds (0, 1, 2 in all) keep the tier short enough for CI.
MIRI_SEEDS="${MIRI_SEEDS:-1 2}"
# (The seeds run together: Miri's -Zmiri-many-seeds over the range from the
# smallest to the largest, in parallel, so "1 2" costs one run's wall time
# on 2 cores.)

declare -A STATUS=()
declare -A NOTE=()
started=$SECONDS
failed=0

banner() {
    echo
    echo "=================================================================="
    echo "== reliability: $*"
    echo "=================================================================="
}

# run NAME CMD...: echoes and runs a command, output also appended to $LOG.
LOG="$(mktemp)"
FUZZ_NOTES="$(mktemp -d)"
trap 'rm -rf "$LOG" "$FUZZ_NOTES" "${FUZZ_BUILD_LOG:-}"' EXIT
run() {
    echo "\$ $*"
    "$@" 2>&1 | tee -a "$LOG"
    return "${PIPESTATUS[0]}"
}

skip() {
    STATUS[$1]="skipped"
    NOTE[$1]="$2"
    echo "SKIPPED $1: $2"
}

wants() { [[ " $TIERS " == *" $1 "* ]]; }

# ---------------------------------------------------------------- set-up

nightly_ok=0
if ! command -v rustup >/dev/null 2>&1; then
    nightly_reason="rustup is not installed, so no nightly toolchain can be installed"
elif rustup run "$NIGHTLY" rustc --version >/dev/null 2>&1; then
    nightly_ok=1
else
    echo "installing the $NIGHTLY toolchain (minimal profile, with miri and rust-src)"
    # Asking for the components up front lets rustup pick the newest nightly
    # that has them (miri is missing from some nightlies).
    if rustup toolchain install "$NIGHTLY" --profile minimal --component miri,rust-src ||
        rustup toolchain install "$NIGHTLY" --profile minimal; then
        nightly_ok=1
    else
        nightly_reason="'rustup toolchain install $NIGHTLY' failed (offline?)"
    fi
fi

# component NAME: installs a nightly component; fails quietly.
component() {
    if rustup "+$NIGHTLY" component list --installed 2>/dev/null | grep -q "^$1"; then
        return 0
    fi
    echo "installing nightly component: $1"
    rustup "+$NIGHTLY" component add "$1"
}

if ((nightly_ok)); then
    echo "toolchain: $(rustc "+$NIGHTLY" --version)"
    HOST="$(rustc "+$NIGHTLY" -vV | sed -n 's/^host: //p')"
fi

# ------------------------------------------------------------------ miri

miri_tier() {
    banner "miri"
    if ! ((nightly_ok)); then
        skip miri "$nightly_reason"
        return
    fi
    if ! component miri || ! component rust-src; then
        skip miri "the miri/rust-src components cannot be installed for $NIGHTLY"
        return
    fi
    local t0=$SECONDS
    run cargo "+$NIGHTLY" miri setup || { skip miri "cargo miri setup failed"; return; }
    local ok=1
    # sync (Arc) mode runs alongside the Rc runs below: each Miri
    # interpreter keeps one core busy, so two at once halve the wall time on
    # 2 cores. It builds in its own target dir so that neither cargo waits
    # for the other's lock (kael-core and its few dependencies, built twice).
    local sync_log sync_pid sync_ok=1
    sync_log="$(mktemp)"
    echo "\$ (alongside) cargo +$NIGHTLY miri test -p kael-core --lib --features sync,$SOFT_FLOATS -- --skip allocator::arena"
    CARGO_TARGET_DIR="$TARGET_DIR/miri-sync" cargo "+$NIGHTLY" miri test -p kael-core --lib \
        --features "sync,$SOFT_FLOATS" -- --skip allocator::arena >"$sync_log" 2>&1 &
    sync_pid=$!
    # Rc mode. The ArenaAllocator tests take `Box::leak`ed buffers (the
    # arena API wants `&'static mut [u8]`, as firmware passes a static), so
    # they run separately with Miri's leak check off; everything else keeps it.
    run cargo "+$NIGHTLY" miri test -p kael-core --lib --features "$SOFT_FLOATS" \
        -- --skip allocator::arena || ok=0
    MIRIFLAGS="$MIRIFLAGS -Zmiri-ignore-leaks" \
        run cargo "+$NIGHTLY" miri test -p kael-core --lib --features "$SOFT_FLOATS" \
        allocator::arena || ok=0
    wait "$sync_pid" || sync_ok=0
    echo "== sync (Arc) mode, run alongside:"
    tee -a "$LOG" <"$sync_log"
    rm -f "$sync_log"
    ((sync_ok)) || ok=0
    # NOTE [Overlapped fuzz builds]: from here on Miri interprets one test
    # binary at a time (one core), so the fuzz targets' sanitizer builds
    # start now, on the other core.
    start_fuzz_build
    # Integration tests (kael-tests builds kael-core with sync, via kael-host).
    local args=()
    for t in "${MIRI_TESTS[@]}"; do args+=(--test "$t"); done
    run cargo "+$NIGHTLY" miri test -p kael-tests -p kael-core --features "$SOFT_FLOATS" \
        "${args[@]}" || ok=0
    # The extra seeds in one run: Miri's many-seeds mode interprets the
    # seeds side by side (one thread each), so two seeds take the wall time
    # of one on 2 cores (they took one run each, one after the other).
    if [[ -n "${MIRI_SEEDS// /}" ]]; then
        local first last
        first="$(tr ' ' '\n' <<<"$MIRI_SEEDS" | grep . | sort -n | head -1)"
        last="$(tr ' ' '\n' <<<"$MIRI_SEEDS" | grep . | sort -n | tail -1)"
        MIRIFLAGS="$MIRIFLAGS -Zmiri-many-seeds=$first..$((last + 1))" \
            run cargo "+$NIGHTLY" miri test -p kael-tests -p kael-core --features "$SOFT_FLOATS" \
            --test concurrency || ok=0
    fi
    # kael-host's unsafe code, in one run (one Miri build of kael-host and
    # its dependencies: each RUSTFLAGS set is a full rebuild, and there
    # were three): the threaded backend's caching allocator (raw blocks
    # kept and handed out again, huge blocks advised); the worker pool
    # (NOTE [Spinning pool]: a borrowed job published to spinning, yielding
    # and parked workers, nested and concurrent callers); its affinity
    # calls (NOTE [Workers leave the caller's CPU]: Linux system calls,
    # which Miri cannot run, so `affinity` takes its no-op form here and
    # the native suite runs the calls); the tiles of transposed operands
    # with their 8x8 AVX blocks; the vector math's feature dispatch (NOTE
    # [Vector math]), layer norm's rows, the elementwise loops at the
    # vector width (NOTE [Loops at the vector width]) and the fused softmax
    # backward's rows (NOTE [Softmax backward rows]), the one-pass Adam's
    # chunks and vector-width loops, the pooled gather/scatter-add's
    # per-row writes, the direct convolution's tiles (NOTE [Direct
    # convolution]) and batch norm's vector sums. Miri reports no CPU
    # features by itself: AVX2 and FMA are enabled, so the unsafe calls
    # into the feature-compiled loops (and the AVX tiles) are taken. The
    # pool-based tests cannot run under Miri; matmul calls into `gemm`,
    # checked against the reference by the conformance suite.
    RUSTFLAGS="${RUSTFLAGS:-} -Ctarget-feature=+avx2,+fma" \
        run cargo "+$NIGHTLY" miri test -p kael-host --lib --features "$SOFT_FLOATS" -- \
        cpu_threaded::alloc cpu_threaded::pool cpu_threaded::affinity cpu_threaded::tiles \
        cpu_threaded::vmath::tests::every_isa_runs_every_function_on_a_few_values \
        cpu_threaded::norm cpu_threaded::elementwise::tests cpu_threaded::softmax \
        cpu_threaded::adam cpu_threaded::index cpu_threaded::conv_direct \
        cpu_threaded::batch_norm || ok=0
    # kael-py's DLPack pointer work (export, import, deleters), kept in
    # plain Rust (python/src/dlpack.rs) so Miri can run it: it cannot run
    # the CPython calls around it (those are exercised by the pytest suite).
    # Building pyo3 asks a python3 for its configuration, as usual.
    if command -v python3 >/dev/null 2>&1; then
        run cargo "+$NIGHTLY" miri test --manifest-path python/Cargo.toml --lib dlpack || ok=0
    else
        echo "SKIPPED miri kael-py dlpack: no python3, which pyo3's build needs"
    fi
    NOTE[miri]="$((SECONDS - t0))s: kael-core unit tests (Rc, sync), kael-tests: ${MIRI_TESTS[*]} (concurrency also with seeds: $MIRI_SEEDS), kael-host (with AVX2+FMA): cpu_threaded::alloc, cpu_threaded::pool, cpu_threaded::affinity, cpu_threaded::tiles, cpu_threaded::vmath, cpu_threaded::norm, cpu_threaded::elementwise, cpu_threaded::softmax, cpu_threaded::adam, cpu_threaded::index, cpu_threaded::conv_direct, cpu_threaded::batch_norm, kael-py: dlpack"
    if ((ok)); then STATUS[miri]="ok"; else STATUS[miri]="FAILED"; failed=1; fi
}

# ------------------------------------------------------------------ fuzz

# fuzz_one DIR TARGET: runs one target for FUZZ_SECONDS; writes its summary
# line to $FUZZ_NOTES/TARGET (it runs in the background, beside another).
fuzz_one() {
    local dir="$1" target="$2"
    # New inputs go to a working corpus under DIR/target (not committed);
    # the committed seeds in DIR/corpus/<target> are only read.
    local work="$dir/target/corpus-work/$target"
    mkdir -p "$work"
    local flog
    flog="$(mktemp)"
    echo "\$ (cd $dir && cargo +$NIGHTLY fuzz run $target) (${FUZZ_SECONDS}s)"
    local rc=0
    (cd "$dir" && cargo "+$NIGHTLY" fuzz run --fuzz-dir "$ROOT/$dir" "$target" "../$work" "corpus/$target" -- \
        -max_total_time="$FUZZ_SECONDS" -timeout=20 -print_final_stats=1) >"$flog" 2>&1 || rc=$?
    # The final stats line: "#N DONE cov: C ft: F corp: ..."
    local done_line execs
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$flog" | tail -1 || true)"
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$flog" | tail -1)"
    cat "$flog" >>"$LOG"
    if ((rc != 0)); then
        tail -60 "$flog"
        rm -f "$flog"
        echo "FUZZ FAILURE in target '$target' (exit $rc); the input is in $dir/artifacts/$target/"
        echo "$target: FAILED" >"$FUZZ_NOTES/$target"
        return 1
    fi
    rm -f "$flog"
    local cov ft
    cov="$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$done_line")"
    ft="$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$done_line")"
    echo "$target: ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}"
    echo "$target: ${execs:-?} execs, cov ${cov:-?}, ft ${ft:-?}" >"$FUZZ_NOTES/$target"
}

# fuzz_tools: cargo-fuzz, installed if missing; a reason on failure.
fuzz_tools() {
    if ! ((nightly_ok)); then
        fuzz_reason="$nightly_reason"
        return 1
    fi
    if ! cargo "+$NIGHTLY" fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz"
        if ! cargo install cargo-fuzz --locked; then
            fuzz_reason="'cargo install cargo-fuzz' failed (offline?)"
            return 1
        fi
    fi
}

# The fuzz targets' sanitizer builds (fuzz/ for kael-core targets in Rc
# mode, fuzz-host/ for kael-host's, each its own cargo-fuzz workspace and
# target dir). NOTE [Overlapped fuzz builds]: when both tiers run, they
# start in the background once Miri's side-by-side core runs are done:
# from then on Miri interprets one test binary at a time (the integration
# tests, the seeds, kael-host), keeping one core busy, so the builds take
# the other core instead of a stretch of wall time of their own.
FUZZ_BUILD_LOG="$(mktemp)"
fuzz_build_pid=""
fuzz_build() {
    local dir
    for dir in fuzz fuzz-host; do
        echo "\$ (cd $dir && cargo +$NIGHTLY fuzz build)"
        (cd "$dir" && nice -n 5 cargo "+$NIGHTLY" fuzz build --fuzz-dir "$ROOT/$dir") || return 1
    done
}

# start_fuzz_build: the background builds of NOTE [Overlapped fuzz
# builds], when the fuzz tier runs after Miri in this run.
start_fuzz_build() {
    if [[ -z "$fuzz_build_pid" ]] && wants fuzz && fuzz_tools; then
        fuzz_build >"$FUZZ_BUILD_LOG" 2>&1 &
        fuzz_build_pid=$!
    fi
}

fuzz_tier() {
    banner "fuzz (${FUZZ_SECONDS}s per target)"
    if [[ -z "$fuzz_build_pid" ]] && ! fuzz_tools; then
        skip fuzz "$fuzz_reason"
        return
    fi
    local t0=$SECONDS
    local ok=1 notes=()
    if [[ -n "$fuzz_build_pid" ]]; then
        echo "(the sanitizer builds started before Miri; waiting for them)"
        local built=0
        wait "$fuzz_build_pid" && built=1
        tee -a "$LOG" <"$FUZZ_BUILD_LOG" | tail -5
        ((built)) || { STATUS[fuzz]="FAILED"; failed=1; return; }
    else
        fuzz_build 2>&1 | tee -a "$LOG" || { STATUS[fuzz]="FAILED"; failed=1; return; }
    fi
    local dir
    for dir in fuzz fuzz-host; do
        # libFuzzer runs one target on one core: FUZZ_JOBS targets (default:
        # the number of cores) fuzz side by side, each for FUZZ_SECONDS, so
        # the wall time shrinks and each target's time does not.
        local targets=() pids=() target
        mapfile -t targets < <(cd "$dir" && cargo "+$NIGHTLY" fuzz list --fuzz-dir "$ROOT/$dir")
        for target in "${targets[@]}"; do
            fuzz_one "$dir" "$target" >"$FUZZ_NOTES/$target.out" 2>&1 &
            pids+=($!)
            if ((${#pids[@]} >= FUZZ_JOBS)); then
                wait "${pids[0]}" || ok=0
                pids=("${pids[@]:1}")
            fi
        done
        for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
        for target in "${targets[@]}"; do
            cat "$FUZZ_NOTES/$target.out"
            notes+=("$(cat "$FUZZ_NOTES/$target" 2>/dev/null || echo "$target: no result")")
        done
    done
    NOTE[fuzz]="$((SECONDS - t0))s: $(printf '%s; ' "${notes[@]}")"
    if ((ok)); then STATUS[fuzz]="ok"; else STATUS[fuzz]="FAILED"; failed=1; fi
}

# ------------------------------------------------------------------ tsan

tsan_tier() {
    banner "tsan"
    if ! ((nightly_ok)); then
        skip tsan "$nightly_reason"
        return
    fi
    case "$HOST" in
        x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu | x86_64-apple-darwin | aarch64-apple-darwin) ;;
        *)
            skip tsan "ThreadSanitizer is not supported on $HOST"
            return
            ;;
    esac
    if ! component rust-src; then
        skip tsan "the rust-src component (for -Zbuild-std) cannot be installed"
        return
    fi
    local t0=$SECONDS
    # std is rebuilt with the sanitizer (-Zbuild-std); a separate target dir
    # keeps these RUSTFLAGS from invalidating the normal build.
    if RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
        TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" \
        CARGO_TARGET_DIR="$TARGET_DIR/tsan" \
        run cargo "+$NIGHTLY" test -Zbuild-std --target "$HOST" -p kael-tests --test concurrency; then
        STATUS[tsan]="ok"
    else
        STATUS[tsan]="FAILED"
        failed=1
    fi
    NOTE[tsan]="$((SECONDS - t0))s: kael-tests/concurrency"
}

for tier in miri fuzz tsan; do
    if wants "$tier"; then
        "${tier}_tier"
        disk_report "after $tier"
        # TSan builds std and the tests again: when space runs short, Miri's
        # builds go first (NOTE [Disk budget] in scripts/test.sh).
        if [[ "$tier" == miri ]]; then make_room miri miri-sync; fi
    fi
done

# --------------------------------------------------------------- summary

echo
echo "=================================================================="
echo "reliability summary ($((SECONDS - started))s)"
for tier in miri fuzz tsan; do
    if wants "$tier"; then
        printf '  %-5s %-8s %s\n' "$tier" "${STATUS[$tier]:-?}" "${NOTE[$tier]:-}"
    fi
done
read -r passed tfailed < <(
    grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$LOG" |
        awk '{p += $4; f += $6} END {print p + 0, f + 0}'
)
echo "tests under miri/tsan: $passed passed, $tfailed failed"
exit "$failed"
