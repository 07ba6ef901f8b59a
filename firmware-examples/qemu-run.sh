#!/usr/bin/env bash
# Runs one firmware ELF under QEMU with semihosting: its output goes to
# stdout and its exit code (semihosting SYS_EXIT) becomes ours.
#
#   ./qemu-run.sh ELF           (also the cargo runner: cargo run --release --bin mlp_infer)
#
# The machine follows from the target directory in ELF's path: thumbv6m ->
# `microbit` (Cortex-M0, nRF51), otherwise `mps2-an386 -cpu cortex-m4`.
# An ELF named defmt_* writes binary defmt frames: they are piped through
# defmt-print when it is on PATH (or $DEFMT_PRINT), else saved raw to
# ELF.defmt.bin with a note that they were not decoded.
# QEMU_TIMEOUT (default 60 s) bounds a run: a HardFault loops forever.
set -euo pipefail

ELF="$1"
case "$ELF" in
    *thumbv6m*) MACHINE=(-machine microbit) ;;
    *) MACHINE=(-machine mps2-an386 -cpu cortex-m4) ;;
esac
QEMU=(timeout "${QEMU_TIMEOUT:-60}" qemu-system-arm "${MACHINE[@]}" -nographic
    -monitor none -serial none -semihosting-config enable=on,target=native -kernel "$ELF")

case "$(basename "$ELF")" in
    defmt_*)
        DEFMT_PRINT="${DEFMT_PRINT:-$(command -v defmt-print || true)}"
        if [[ -n "$DEFMT_PRINT" ]]; then
            # pipefail: the status is QEMU's when the firmware fails, not defmt-print's.
            "${QEMU[@]}" | "$DEFMT_PRINT" -e "$ELF" --log-format '{L} {s}' stdin
        else
            status=0
            "${QEMU[@]}" >"$ELF.defmt.bin" || status=$?
            echo "(defmt-print not found: $(wc -c <"$ELF.defmt.bin") bytes of defmt frames saved to $ELF.defmt.bin, not decoded;"
            echo " cargo install defmt-print --version 1.2.0 --locked, then: defmt-print -e $ELF stdin < $ELF.defmt.bin)"
            exit "$status"
        fi
        ;;
    *) exec "${QEMU[@]}" ;;
esac
