#!/usr/bin/env bash
# The firmware tier: builds every example in firmware-examples/ and runs each
# under QEMU (emulated Cortex-M4F and Cortex-M0), failing if any exits
# non-zero; then prints the flash/RAM table and what fills mlp_infer's flash.
#
#   bash scripts/firmware.sh        (from any directory)
#
# It installs what it needs when missing: the rust targets thumbv6m-none-eabi
# and thumbv7em-none-eabihf, rustup's llvm-tools (llvm-size, llvm-nm) and
# Debian's qemu-system-arm (without recommends; needs root).
#
# Builds (release: opt-level "z", fat LTO, one codegen unit), one per mode:
#   thumbv7em-none-eabihf, Rc mode     baseline mlp_infer mlp_infer_small mlp_train arena sine_int8 speech_int8
#                                      sine_plan sine_plan_train sine_loops
#                                      mlp_infer_plan mlp_train_plan arena_plan sine_eager   (mps2-an386, Cortex-M4F)
#   thumbv7em-none-eabihf, sync (Arc)  mlp_infer arena
#   thumbv6m-none-eabi,    Rc mode     baseline mlp_infer_small mlp_train sine_int8 speech_int8
#                                      sine_plan sine_plan_train sine_loops
#                                      mlp_infer_plan mlp_train_plan arena_plan sine_eager   (microbit, Cortex-M0)
#
# mlp_infer (Device::cpu(): every kernel of every dtype) no longer fits the
# micro:bit's 256 KiB of flash (it was 254 KiB when it last ran there, and
# the fused softmax backward and the error texts of the int8 path grew it
# past the end); M0 firmware selects its kernels, as mlp_infer_small and
# mlp_train do.
#   thumbv7em-none-eabihf, defmt       defmt_infer
# (arena does not fit the micro:bit's 256 KiB of flash; see
# firmware-examples/README.md.)
#
# defmt_infer's log frames are decoded with defmt-print when it is installed
# (on PATH or in ~/.cargo/bin). Building it takes minutes, so it is installed
# only with KAEL_FIRMWARE_DEFMT_PRINT=install; otherwise the example still
# runs and must exit 0, and its output is saved undecoded.
# KAEL_FIRMWARE_OPT_S=1 adds an opt-level "s" build of the Cortex-M4F examples
# to the table.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../firmware-examples"
FW="$PWD"
# The firmware crate keeps its own target dir, whatever the caller uses for
# host builds.
export CARGO_TARGET_DIR="$FW/target"
started=$SECONDS

step() { echo; echo "== $*"; }

# --------------------------------------------------------------- set-up

step "set-up"
if command -v rustup >/dev/null 2>&1; then
    installed="$(rustup target list --installed)"
    for t in thumbv6m-none-eabi thumbv7em-none-eabihf; do
        if ! grep -qx "$t" <<<"$installed"; then
            echo "installing rust target $t"
            rustup target add "$t"
        fi
    done
    if ! rustup component list --installed | grep -q '^llvm-tools'; then
        echo "installing rust component llvm-tools"
        rustup component add llvm-tools
    fi
fi
TOOLS="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
LLVM_SIZE="$TOOLS/llvm-size"
LLVM_NM="$TOOLS/llvm-nm"
for tool in "$LLVM_SIZE" "$LLVM_NM"; do
    if [[ ! -x "$tool" ]]; then
        echo "error: $tool not found; run: rustup component add llvm-tools" >&2
        exit 1
    fi
done

if ! command -v qemu-system-arm >/dev/null 2>&1; then
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "error: qemu-system-arm not found; install it (Debian: apt-get install --no-install-recommends qemu-system-arm)" >&2
        exit 1
    fi
    echo "installing qemu-system-arm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-arm >/dev/null
fi

DEFMT_PRINT="$(command -v defmt-print || true)"
if [[ -z "$DEFMT_PRINT" && -x "$HOME/.cargo/bin/defmt-print" ]]; then
    DEFMT_PRINT="$HOME/.cargo/bin/defmt-print"
fi
if [[ -z "$DEFMT_PRINT" && "${KAEL_FIRMWARE_DEFMT_PRINT:-}" == install ]]; then
    echo "installing defmt-print (takes a few minutes)"
    cargo install defmt-print --version 1.2.0 --locked
    DEFMT_PRINT="$HOME/.cargo/bin/defmt-print"
fi
export DEFMT_PRINT # read by qemu-run.sh; empty: not decoded
echo "$(rustc --version); $(qemu-system-arm --version | head -1)"
echo "defmt-print: ${DEFMT_PRINT:-not installed (defmt output is not decoded; KAEL_FIRMWARE_DEFMT_PRINT=install to install it)}"

# --------------------------------------------------------------- builds

# One row per example run: "label|elf".
RUNS=()

# build LABEL TARGET TARGET_DIR OPT_LEVEL "CARGO ARGS" BIN...
build() {
    local label="$1" target="$2" dir="$3" opt="$4" args="$5"
    shift 5
    local t0=$SECONDS bins=()
    for b in "$@"; do bins+=(--bin "$b"); done
    step "build: $label"
    # shellcheck disable=SC2086 # $args is a word list
    CARGO_PROFILE_RELEASE_OPT_LEVEL="$opt" \
        cargo build --quiet --release --target "$target" --target-dir "$dir" $args "${bins[@]}"
    for b in "$@"; do
        RUNS+=("$label|$dir/$target/release/$b")
    done
    echo "built $* ($((SECONDS - t0))s)"
}

build "M4F rc" thumbv7em-none-eabihf target z "" baseline mlp_infer mlp_infer_small mlp_train arena sine_int8 speech_int8 sine_plan sine_plan_train sine_loops mlp_infer_plan mlp_train_plan arena_plan sine_eager
build "M4F sync" thumbv7em-none-eabihf target/sync z "--features sync" mlp_infer arena
build "M0 rc" thumbv6m-none-eabi target z "" baseline mlp_infer_small mlp_train sine_int8 speech_int8 sine_plan sine_plan_train sine_loops mlp_infer_plan mlp_train_plan arena_plan sine_eager
build "M4F defmt" thumbv7em-none-eabihf target/defmt z "--features defmt" defmt_infer
# Inference-only images without kael-core's `autograd` feature (NOTE
# [Autograd feature]): what a firmware that never trains links.
build "M4F lean" thumbv7em-none-eabihf target/lean z "--no-default-features" sine_eager sine_plan mlp_infer
build "M0 lean" thumbv6m-none-eabi target/lean z "--no-default-features" sine_eager sine_plan
if [[ "${KAEL_FIRMWARE_OPT_S:-}" == 1 ]]; then
    build "M4F rc s" thumbv7em-none-eabihf target/opt-s s "" baseline mlp_infer mlp_infer_small mlp_train arena
fi

# ----------------------------------------------------------------- runs

LOGS="$FW/target/firmware-logs"
mkdir -p "$LOGS"
failed=()
for run in "${RUNS[@]}"; do
    label="${run%%|*}"
    elf="${run#*|}"
    name="$(basename "$elf")"
    log="$LOGS/${label// /_}-$name.log"
    step "run: $name ($label) under QEMU"
    status=0
    QEMU_TIMEOUT=60 bash ./qemu-run.sh "$elf" >"$log" 2>&1 || status=$?
    sed 's/^/    /' "$log"
    if ((status != 0)); then
        echo "FAILED: $name ($label) exited with status $status"
        failed+=("$name ($label): $status")
    fi
done

# ---------------------------------------------------- instruction counts

# Exact guest instruction counts from a QEMU TCG plugin (tools/insn_count.c,
# built here with gcc): each example runs with `KEY=0` and `KEY=N` extra
# inferences (or training steps); everything else in the two runs is the
# same, so the difference over N is the cost of one (NOTE in sine_int8.rs).
# Deterministic: the same binary gives the same counts on any host. The
# f32 sine rows compare kael's planned replay (sine_plan) and its eager
# path (sine_eager, eight tensor ops per inference) with the same model
# written as plain loops (sine_loops), built and counted in this run.
step "instructions per inference / training step (QEMU TCG plugin, exact counts)"
PLUGIN="$FW/target/insn_count.so"
if gcc -shared -fPIC -O2 -o "$PLUGIN" tools/insn_count.c; then
    for example in sine_int8:16:extra:inference speech_int8:4:extra:inference \
        sine_plan:16:extra:inference sine_loops:16:extra:inference sine_eager:16:extra:inference \
        sine_plan_train:4:extra:"training step" sine_loops:4:steps:"training step" \
        mlp_infer_plan:6:extra:inference mlp_train_plan:4:extra:"training step" \
        sine_eager:16:extra:inference:lean sine_plan:16:extra:inference:lean; do
        # An optional fifth field names a build under target/ (the lean one).
        IFS=: read -r name extra key what variant <<<"$example"
        dir="target${variant:+/$variant}"
        for pair in "M4F|thumbv7em-none-eabihf|-machine mps2-an386 -cpu cortex-m4" "M0|thumbv6m-none-eabi|-machine microbit"; do
            IFS='|' read -r label target machine <<<"$pair"
            counts=()
            for n in 0 "$extra"; do
                # shellcheck disable=SC2086 # $machine is a word list
                c="$(timeout 300 qemu-system-arm $machine -nographic -monitor none -serial none \
                    -semihosting-config enable=on,target=native -kernel "$dir/$target/release/$name" \
                    -append "$key=$n" -plugin "$PLUGIN" -d plugin 2>&1 | grep -oE 'insn count [0-9]+' | grep -oE '[0-9]+$' || true)"
                counts+=("${c:-}")
            done
            if [[ -n "${counts[0]}" && -n "${counts[1]}" ]]; then
                echo "$name${variant:+ $variant} ($label): $(((counts[1] - counts[0]) / extra)) instructions per $what (runs of ${counts[0]} and ${counts[1]} instructions with 0 and $extra more)"
            else
                echo "FAILED: $name${variant:+ $variant} ($label): no instruction count from the QEMU plugin"
                failed+=("$name${variant:+ $variant} instruction count ($label)")
            fi
        done
    done
else
    echo "FAILED: could not build the instruction-count plugin (tools/insn_count.c) with gcc"
    failed+=("insn_count plugin build")
fi

# ----------------------------------------------------------------- sizes

# Sum of the sizes of the named sections (llvm-size -A).
sections() {
    local elf="$1"
    shift
    "$LLVM_SIZE" -A "$elf" | awk -v want=" $* " '
        index(want, " " $1 " ") { s += $2 } END { print s + 0 }'
}

# The heap and arena buffers (statics named MEMORY and ARENA).
buffers() {
    "$LLVM_NM" -C -S --radix=d "$1" | awk '
        / (b|B|d|D) / && (/::MEMORY::/ || /::ARENA::/) { s += $2 } END { print s + 0 }'
}

# "<label> peak N B" from an example's output, or "-".
peak() {
    local v
    v="$(grep -oE "$1 peak:? [0-9]+" "$2" | head -1 | grep -oE '[0-9]+$' || true)"
    echo "${v:--}"
}

step "sizes (bytes; flash = .vector_table+.text+.rodata+.data, RAM = .data+.bss incl. heap/arena buffers; the stack has the rest of RAM)"
printf '%-10s %-16s %8s %8s %8s %8s %9s %10s %10s %10s\n' \
    mode example .text .rodata flash RAM "heap+arena" "heap peak" "stack peak" "arena/tensor peak"
for run in "${RUNS[@]}"; do
    label="${run%%|*}"
    elf="${run#*|}"
    name="$(basename "$elf")"
    log="$LOGS/${label// /_}-$name.log"
    text="$(sections "$elf" .text)"
    rodata="$(sections "$elf" .rodata)"
    flash="$(sections "$elf" .vector_table .text .rodata .data)"
    ram="$(sections "$elf" .data .bss .uninit)"
    tensor="$(peak arena "$log")"
    [[ "$tensor" == - ]] && tensor="$(peak "tensor memory" "$log")"
    [[ "$tensor" == - ]] && tensor="$(grep -oE 'peak: [0-9]+' "$log" | head -1 | grep -oE '[0-9]+$' || echo -)"
    printf '%-10s %-16s %8s %8s %8s %8s %9s %10s %10s %10s\n' \
        "$label" "$name" "$text" "$rodata" "$flash" "$ram" "$(buffers "$elf")" \
        "$(peak heap "$log")" "$(peak stack "$log")" "$tensor"
done

base="$(sections target/thumbv7em-none-eabihf/release/baseline .vector_table .text .rodata .data)"

# What fills one ELF's flash, by symbol group (llvm-nm sizes; the rest is
# .rodata without a symbol: strings, panic locations, tables).
breakdown() {
    local elf="$1" flash
    flash="$(sections "$elf" .vector_table .text .rodata .data)"
    echo "$(basename "$elf") $flash B - baseline (runtime, semihosting, heap, panic handler) $base B = $((flash - base)) B for kael-core + the model + the example"
    "$LLVM_NM" -C -S --size-sort --radix=d "$elf" | awk -v flash="$flash" '
        $3 ~ /^[tTrR]$/ {
            size = $2 + 0
            name = $0
            sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", name)
            if (name ~ /CpuBackend/ || name ~ /kael_core(::|\.\.)cpu/) k = "kael-core CPU kernels"
            else if (name ~ /kael_core(::|\.\.)tensor/) k = "kael-core tensor front end (checks, broadcasting, views, op records)"
            else if (name ~ /kael_core(::|\.\.)autograd/) k = "kael-core autograd (graph nodes, rules)"
            else if (name ~ /kael_core(::|\.\.)plan/) k = "kael-core plan (validation, replay kernels)"
            else if (name ~ /kael_core/) k = "kael-core layout, shape, storage, allocator, errors"
            else if (name ~ /^libm/) k = "libm (float math of the unary kernels)"
            else if (name ~ /compiler_builtins|__aeabi/) k = "compiler_builtins (soft-float f64, 64-bit division, memcpy/memset)"
            else if (name ~ /half/) k = "half (f16/bf16 conversions)"
            else if (name ~ /MLP_BLOB/) k = "the model file (weights, inputs, expected outputs)"
            else if (name ~ /kael_firmware_examples|mlp_infer/) k = "the example and its support code (printing, checks)"
            else if (name ~ /core::|core\.\.|alloc|^<char>|^<&/) k = "core/alloc (fmt, panics, collections)"
            else if (name ~ /^OUTLINED_FUNCTION/) k = "machine-outlined code (shared instruction runs)"
            else if (name ~ /^\.L/) k = "anonymous constants (strings, tables)"
            else k = "other (vector table, runtime, allocator)"
            by[k] += size
            total += size
        }
        END {
            by["not attributed to a symbol (strings, panic locations, padding)"] = flash - total
            for (k in by) printf "%8d B  %5.1f%%  %s\n", by[k], 100 * by[k] / flash, k
        }' | sort -rn
    echo "largest symbols:"
    "$LLVM_NM" -C -S --size-sort --radix=d "$elf" | awk '$3 ~ /^[tTrR]$/' | tail -8 |
        awk '{ n = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", n); printf "%8d B  %s\n", $2, substr(n, 1, 110) }' | sort -rn
}

step "what fills the inference examples' flash (M4F, Rc mode, opt-level z)"
echo "(TensorFlow Lite Micro's published framework size: about 10 KB on a Cortex-M3, without op kernels)"
for b in mlp_infer mlp_infer_small sine_int8 sine_plan mlp_infer_plan; do
    echo
    breakdown "target/thumbv7em-none-eabihf/release/$b"
done

# -------------------------------------------------------------- verdict

echo
passed=$((${#RUNS[@]} - ${#failed[@]}))
if ((${#failed[@]})); then
    echo "firmware example runs that FAILED under QEMU (logs in $LOGS):"
    printf '    %s\n' "${failed[@]}"
    echo "firmware: $passed passed, ${#failed[@]} failed"
    exit 1
fi
echo "all ${#RUNS[@]} firmware example runs passed under QEMU ($((SECONDS - started))s)"
echo "firmware: $passed passed, 0 failed"
