#!/usr/bin/env bash
# kael's Python bindings (python/): format and clippy of the kael-py crate,
# `pip install ./python` into a virtual environment this script makes (under
# the target dir), the README's one-line check, then the pytest suite.
#
#   bash scripts/python.sh            everything above
#
# It installs what it needs itself (a venv with pip, maturin, pytest and
# numpy from PyPI), so a fresh machine needs only python3 >= 3.11 and cargo.
# PyTorch is not installed (it is large): the suite's PyTorch comparisons
# skip with a visible reason; run them with a python that has torch:
#   $TORCH_PY -m pip install ./python && $TORCH_PY -m pytest python/tests
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="$CARGO_TARGET_DIR/py-bindings-venv"

if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "scripts/python.sh: kael's bindings need CPython >= 3.11 (found $(python3 --version 2>&1)); install it first" >&2
    exit 1
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "making the venv $VENV"
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip maturin pytest numpy
export PYO3_PYTHON="$PY"

echo "== format, kael-py"
cargo fmt --manifest-path python/Cargo.toml --check
echo "== clippy, kael-py"
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings
echo "== clippy, kael-py with cuda (kael.cuda; the driver loads at run time, so it builds anywhere)"
cargo clippy --manifest-path python/Cargo.toml --all-targets --features cuda -- -D warnings

echo "== pip install ./python (release build of the extension)"
"$PY" -m pip install --quiet --force-reinstall ./python

# Run from outside the source tree, so `import kael` is the installed package.
cd "$CARGO_TARGET_DIR"
echo "== the README's check"
"$PY" -c "import kael; print(kael.arange(6.).reshape(2, 3).t())"
echo "== the README's Python example"
"$PY" "$ROOT/python/examples/train_mlp.py"
echo "== pytest"
"$PY" -m pytest "$ROOT/python/tests" -q -rs -p no:cacheprovider
