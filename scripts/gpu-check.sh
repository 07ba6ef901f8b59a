#!/usr/bin/env bash
# Checks the CUDA backend on a machine with an NVIDIA GPU: builds kael with
# the `cuda` feature, runs every kael-tests test binary with CUDA required
# (a missing GPU fails instead of skipping), then prints the benchmark
# (host-backend/src/bin/cuda-bench.rs: matmul 4096 f32/bf16 against
# cuBLAS, elementwise add against a device-to-device memcpy, one training
# step). Meant to finish within 8 minutes, the build included.
#
#   bash scripts/gpu-check.sh              build here, then run (needs cargo and a GPU)
#   bash scripts/gpu-check.sh build DIR    build only, into DIR (no GPU needed)
#   bash scripts/gpu-check.sh run DIR      run what `build` left in DIR (no cargo needed)
#
# The split is for a GPU machine without a Rust toolchain (the device tool's
# machines have CUDA but no cargo): build here into a folder that git
# ignores, carry it, run it there:
#
#   echo /.gpu-check/ >> .git/info/exclude
#   bash scripts/gpu-check.sh build .gpu-check       # here, ~5 min on 2 cores
#   device run, carry [".gpu-check"]: bash scripts/gpu-check.sh run .gpu-check
#
# Binaries are release builds without debug info, stripped (a few MiB each),
# packed into DIR/bundle.tar.xz (~11 MiB) so they fit the device tool's
# 64 MiB carry limit; `run` unpacks it into a temporary folder.
# The conformance suite runs on CUDA twice: `conformance_suite_passes_on_cuda`
# in tests/cuda.rs, and tests/conformance.rs over every device of the run
# (kael-tests always builds kael-core with `conformance`). Extra kael-tests
# features can be added with KAEL_GPU_CHECK_FEATURES="cuda ...".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$SECONDS
mode="${1:-all}"
dir="${2:-target/gpu-check}"
features="${KAEL_GPU_CHECK_FEATURES:-cuda}"

build() {
    local out="$1"
    command -v cargo >/dev/null || {
        echo "gpu-check: cargo not found; build elsewhere with: bash scripts/gpu-check.sh build DIR" >&2
        exit 2
    }
    # only ever delete a folder this script made (it leaves a marker)
    if [[ -e "$out" && ! -e "$out/.gpu-check-build" && -n "$(ls -A "$out" 2>/dev/null)" ]]; then
        echo "gpu-check: $out exists and was not made by this script; pick another folder" >&2
        exit 2
    fi
    rm -rf "$out"
    mkdir -p "$out/tests"
    touch "$out/.gpu-check-build"
    export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true
    local feats=""
    for f in $features; do feats+="kael-tests/$f,"; done
    echo "== build (release, features: ${feats%,})"
    cargo build --release -p kael-host --features cuda --bin cuda-bench
    cp "${CARGO_TARGET_DIR:-target}/release/cuda-bench" "$out/"
    local json
    json="$(cargo test --release -p kael-tests --features "${feats%,}" --no-run --message-format=json)"
    local exe name
    while IFS= read -r exe; do
        name="$(basename "$exe")"
        name="${name%-*}" # drop cargo's hash
        cp "$exe" "$out/tests/$name"
    done < <(sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' <<<"$json" | grep -v '/build/' | sort -u)
    # The device tool carries at most 64 MiB; the stripped binaries are
    # ~96 MiB (27 test binaries), ~11 MiB compressed. `run` unpacks.
    local n
    n="$(ls "$out/tests" | wc -l)"
    tar -C "$out" -cf - cuda-bench tests | xz -T0 -6 >"$out/bundle.tar.xz"
    rm -rf "$out/tests" "$out/cuda-bench"
    echo "== built into $out in $((SECONDS - started))s: $n test binaries, $(du -sh "$out" | cut -f1) in all (bundle.tar.xz)"
}

# Library folders a CUDA install or a pip nvidia-* package may use.
cuda_lib_path() {
    local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib)
    if command -v python3 >/dev/null; then
        while IFS= read -r d; do dirs+=("$d"); done < <(python3 - <<'EOF' 2>/dev/null || true
import glob, os, sys
seen = set()
for p in sys.path:
    for d in glob.glob(os.path.join(p, "nvidia", "*", "lib")) + glob.glob(os.path.join(p, "nvidia", "cu*", "lib")):
        if d not in seen:
            seen.add(d)
            print(d)
EOF
        )
    fi
    local path=""
    for d in "${dirs[@]}"; do [[ -d "$d" ]] && path+="$d:"; done
    echo "${path}${LD_LIBRARY_PATH:-}"
}

run() {
    local in="$1"
    if [[ -f "$in/bundle.tar.xz" && ! -x "$in/cuda-bench" ]]; then
        local unpacked
        unpacked="$(mktemp -d)"
        xz -dc "$in/bundle.tar.xz" | tar -C "$unpacked" -xf -
        in="$unpacked"
    fi
    [[ -x "$in/cuda-bench" ]] || {
        echo "gpu-check: $in/cuda-bench missing; run: bash scripts/gpu-check.sh build $in" >&2
        exit 2
    }
    LD_LIBRARY_PATH="$(cuda_lib_path)"
    export LD_LIBRARY_PATH KAEL_REQUIRE_CUDA=1 RUST_BACKTRACE=1
    echo "== machine"
    command -v nvidia-smi >/dev/null &&
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi not found"
    for lib in libcuda.so libnvrtc.so libcublas.so; do
        local hit
        hit="$( (ldconfig -p 2>/dev/null | grep -o "/[^ ]*/$lib[.0-9]*" || true; IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d"/$lib* 2>/dev/null || true; done) | head -1)"
        echo "$lib: ${hit:-NOT FOUND}"
    done
    local passed=0 failed=0 broken=()
    echo "== tests (CUDA required)"
    for t in "$in"/tests/*; do
        local log rc=0
        log="$(mktemp)"
        timeout 180 "$t" --test-threads=4 >"$log" 2>&1 || rc=$?
        local p f
        read -r p f < <(grep -oE 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$log" |
            awk '{p += $4; f += $6} END {print p + 0, f + 0}')
        passed=$((passed + p))
        failed=$((failed + f))
        echo "$(basename "$t"): $p passed, $f failed (exit $rc)"
        if ((rc != 0)); then
            broken+=("$(basename "$t")")
            grep -E -A2 '^thread .* panicked' "$log" | head -30 || true
            ((f > 0)) || failed=$((failed + 1))
        fi
        rm -f "$log"
    done
    echo "== benchmark"
    local brc=0
    timeout 240 "$in/cuda-bench" || brc=$?
    echo
    echo "gpu-check: $passed passed, $failed failed; benchmark exit $brc; $((SECONDS - started))s"
    ((${#broken[@]} == 0)) || echo "failing test binaries: ${broken[*]}"
    ((failed == 0 && brc == 0))
}

case "$mode" in
all)
    build "$dir"
    run "$dir"
    ;;
build) build "$dir" ;;
run) run "$dir" ;;
*)
    echo "usage: bash scripts/gpu-check.sh [build DIR | run DIR]" >&2
    exit 2
    ;;
esac
