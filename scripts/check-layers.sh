#!/usr/bin/env bash
# The foundation of kael-core must not depend on the reference backend:
# device, device_kind, error, storage, the backend boundary, layouts,
# shapes, dtypes, allocators and the shared handles import nothing from
# `crate::cpu` (docs/design.md, "Mutation, aliasing and the backend
# boundary"). Comments and `#[cfg(test)]` modules are not counted.
#
#   bash scripts/check-layers.sh        (from any directory)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../core/src"

FOUNDATION=(device.rs device_kind.rs error.rs storage.rs shared.rs dtype.rs shape.rs
    backend layout allocator)
status=0
while IFS= read -r -d '' f; do
    # Source lines before the first #[cfg(test)], without line comments.
    hits="$(awk '/^#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ": " $0 }' "$f" |
        grep -v '^[^:]*:[0-9]*: *//' | grep -E 'crate::cpu|super::cpu|cpu::CpuBackend' || true)"
    if [[ -n "$hits" ]]; then
        echo "$hits"
        status=1
    fi
done < <(find "${FOUNDATION[@]}" -name '*.rs' -print0)
if ((status)); then
    echo "error: the foundation above imports the reference backend (crate::cpu); move the dependency into cpu/ (see docs/design.md)" >&2
else
    echo "ok: ${#FOUNDATION[@]} foundation modules import nothing from crate::cpu"
fi
exit "$status"
