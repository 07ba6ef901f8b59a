"""kael's errors as Python exceptions (NOTE [Python exceptions]); bad
input never crashes the interpreter and changes nothing."""

import numpy as np
import pytest

import kael


def test_shape_errors_are_value_errors_that_name_the_op():
    a = kael.zeros(2, 3)
    with pytest.raises(ValueError) as info:
        a + kael.zeros(4)
    e = info.value
    assert isinstance(e, kael.KaelShapeError) and isinstance(e, kael.KaelError)
    assert e.kind == "BroadcastMismatch" and e.op == "add"
    assert "add" in str(e)


def test_dim_errors_are_index_errors():
    with pytest.raises(IndexError) as info:
        kael.zeros(2, 3).sum(5)
    assert info.value.kind == "DimOutOfRange"


def test_dtype_errors_are_value_and_type_errors():
    with pytest.raises(kael.KaelDTypeError) as info:
        kael.zeros(2) @ kael.zeros(2, dtype=kael.float64)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    # in Python spelling: .to(kael.float32), not to_dtype(DType::F32)
    msg = str(info.value)
    assert ".to(kael.float32)" in msg and "DType::" not in msg and "F64" not in msg, msg
    # an in-place op whose promoted result the destination cannot hold
    x = kael.zeros(2, dtype=kael.int64)
    with pytest.raises(kael.KaelDTypeError) as info:
        x += 0.5
    assert info.value.kind == "CannotCast"
    assert x.tolist() == [0, 0]


def test_wrong_python_types_are_type_errors():
    with pytest.raises(TypeError):
        kael.zeros(2) + object()
    with pytest.raises(TypeError):
        kael.zeros(2).reshape("a", "b")


BAD_CALLS = [
    lambda: kael.zeros(-1),
    lambda: kael.zeros(2, 3).view(7),
    lambda: kael.zeros(2, 3).permute(0, 0),
    lambda: kael.zeros(2, 3).narrow(0, 1, 5),
    lambda: kael.zeros(2, 3).as_strided((2, 3), (100, 1)),
    lambda: kael.zeros(2, 3).transpose(0, 9),
    lambda: kael.zeros(2, 3)[5],
    lambda: kael.zeros(2, 3).expand(4, 3),
    lambda: kael.zeros(3) @ kael.zeros(4),
    lambda: kael.arange(3.0).item(),
    lambda: kael.tensor([[1], [2, 3]]),
    lambda: kael.zeros(3).view(kael.float64),
    lambda: kael.zeros(2, dtype=kael.int64).requires_grad_(),
    lambda: kael.ones(2).backward(),
    lambda: kael.cat([]),
    lambda: kael.arange(0, 1, 0),
    lambda: kael.zeros(2).to("gpu"),
    lambda: kael.from_dlpack(object()),
    lambda: kael.from_numpy(np.zeros(3, dtype=np.complex128)),
    lambda: kael.zeros(2, 2).chunk(0),
    lambda: kael.zeros(2).topk(5),
    lambda: kael.tensor(2**70),
]


@pytest.mark.parametrize("call", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_bad_input_raises_a_python_exception_not_a_crash(call):
    with pytest.raises(Exception) as info:
        call()
    # A Rust panic would surface as pyo3's PanicException (a BaseException).
    assert type(info.value).__name__ != "PanicException"


def test_a_refused_in_place_op_changes_nothing():
    a = kael.arange(4.0)
    v = a.version
    with pytest.raises(ValueError):
        a.add_(kael.ones(5))
    assert a.tolist() == [0, 1, 2, 3] and a.version == v


def test_expand_past_usize_is_refused():
    with pytest.raises(ValueError, match="overflows"):
        kael.zeros(3).expand(2**62, 2**62, 3)


def test_numpy_of_bfloat16_is_refused_with_the_conversion():
    # numpy has no bfloat16 (PyTorch refuses the same); never an object array
    t = kael.zeros(2, dtype=kael.bfloat16)
    with pytest.raises(TypeError, match="float32"):
        t.numpy()
    assert t.to(kael.float32).numpy().tolist() == [0.0, 0.0]
