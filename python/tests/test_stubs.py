"""The type stubs describe the extension as built (they are generated from
it; a binding added without regenerating them fails here)."""

import pathlib
import subprocess
import sys

import kael

TOOLS = pathlib.Path(__file__).resolve().parent.parent / "tools" / "gen_stubs.py"


def test_stubs_are_up_to_date():
    r = subprocess.run([sys.executable, str(TOOLS), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout


def test_stubs_name_every_tensor_method():
    stub = (TOOLS.parent.parent / "kael" / "_kael.pyi").read_text()
    for name in ["add", "matmul", "backward", "view", "__dlpack__", "shares_storage", "exp_"]:
        assert f"def {name}(" in stub
    assert hasattr(kael.Tensor, "exp_")


def test_every_public_item_has_a_docstring():
    missing = [
        n
        for n in dir(kael.Tensor)
        if not n.startswith("_") and not (getattr(kael.Tensor, n).__doc__ or "").strip()
    ]
    assert missing == []
