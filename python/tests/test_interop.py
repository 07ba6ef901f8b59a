"""Zero-copy numpy, buffer protocol and DLPack (NOTE [Zero-copy memory]).
Each test shows a write on one side seen on the other."""

import gc
import weakref

import numpy as np
import pytest

import kael
from conftest import torch_or_skip


def test_numpy_asarray_shares_memory_both_ways(device):
    t = kael.arange(6.0, device=device).reshape(2, 3)
    n = np.asarray(t)
    assert n.dtype == np.float32 and n.shape == (2, 3)
    n[1, 2] = 50.0
    assert t[1, 2].item() == 50.0
    t[0, 0] = -1.0
    assert n[0, 0] == -1.0


def test_numpy_sees_strided_views_without_copying(device):
    t = kael.arange(12.0, device=device).reshape(3, 4)
    v = t.t()[1:, ::2]
    n = np.asarray(v)
    assert n.tolist() == v.tolist()
    assert n.strides == tuple(s * 4 for s in v.stride())
    n[0, 0] = 99.0
    assert t[0, 1].item() == 99.0


def test_memoryview_has_the_tensor_format_and_shape(device):
    t = kael.tensor([[1, 2], [3, 4]], dtype=kael.int32, device=device)
    m = memoryview(t)
    assert (m.format, m.shape, m.strides, m.readonly) == ("i", (2, 2), (8, 4), False)
    m[1, 0] = 30
    assert t.tolist() == [[1, 2], [30, 4]]


def test_the_buffer_keeps_the_tensor_alive():
    t = kael.arange(4.0)
    n = np.asarray(t)
    del t
    gc.collect()
    assert n.tolist() == [0, 1, 2, 3]


def test_from_numpy_shares_memory_both_ways(device):
    kael.set_default_device(device)
    try:
        a = np.arange(6, dtype=np.float64).reshape(2, 3)
        t = kael.from_numpy(a)
        assert t.dtype == kael.float64 and t.shape == (2, 3)
        a[0, 1] = 10.0
        assert t[0, 1].item() == 10.0
        t.add_(1.0)
        assert a.tolist() == [[1, 11, 3], [4, 5, 6]]
    finally:
        kael.set_default_device(kael.threaded)


def test_from_numpy_keeps_the_array_alive():
    a = np.arange(4, dtype=np.float32)
    ref = weakref.ref(a) if hasattr(a, "__weakref__") else None
    t = kael.from_numpy(a)
    del a
    gc.collect()
    assert t.tolist() == [0, 1, 2, 3]
    del ref


def test_from_numpy_takes_views_and_refuses_negative_strides():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = kael.from_numpy(a[1:, ::2])
    assert t.tolist() == a[1:, ::2].tolist()
    t[0, 0] = -7
    assert a[1, 0] == -7
    with pytest.raises(ValueError, match="negative stride"):
        kael.from_numpy(a[::-1])


def test_read_only_arrays_become_read_only_tensors():
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    t = kael.from_numpy(a)
    assert t.tolist() == [0, 1, 2]
    with pytest.raises(kael.KaelError, match="read-only"):
        t.add_(1.0)
    assert a.tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "np_dtype,kael_dtype",
    [
        (np.float32, kael.float32),
        (np.float64, kael.float64),
        (np.float16, kael.float16),
        (np.int64, kael.int64),
        (np.int32, kael.int32),
        (np.int16, kael.int16),
        (np.int8, kael.int8),
        (np.uint8, kael.uint8),
        (np.bool_, kael.bool),
    ],
)
def test_every_dtype_round_trips_through_numpy(np_dtype, kael_dtype):
    a = np.array([[1, 0], [1, 1]], dtype=np_dtype)
    t = kael.from_numpy(a)
    assert t.dtype == kael_dtype
    back = np.asarray(t)
    assert back.dtype == a.dtype and back.tolist() == a.tolist()
    assert np.shares_memory(a, back)


def test_unsupported_numpy_dtypes_are_refused():
    with pytest.raises(ValueError, match="no kael dtype"):
        kael.from_numpy(np.zeros(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="no kael dtype"):
        kael.from_numpy(np.zeros(2, dtype=np.uint32))


def test_dlpack_export_to_numpy_shares_memory(device):
    t = kael.arange(6.0, device=device).reshape(2, 3).t()
    n = np.from_dlpack(t)
    assert n.tolist() == t.tolist()
    n[0, 1] = 42.0
    assert t[0, 1].item() == 42.0


def test_dlpack_import_from_numpy_shares_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kael.from_dlpack(a)
    t[1, 1] = -3.0
    assert a[1, 1] == -3.0
    a[0, 0] = 8.0
    assert t[0, 0].item() == 8.0


def test_dlpack_round_trip_keeps_one_storage():
    t = kael.arange(4.0)
    back = kael.from_dlpack(np.from_dlpack(t))
    back.mul_(2.0)
    assert t.tolist() == [0, 2, 4, 6]


def test_dlpack_capsule_is_consumed_once():
    cap = kael.arange(3.0).__dlpack__()
    t = kael.from_dlpack(cap)
    assert t.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="consumed"):
        kael.from_dlpack(cap)


def test_dlpack_device_is_cpu(device):
    assert kael.zeros(1, device=device).__dlpack_device__() == (1, 0)


def test_torch_shares_memory_through_dlpack():
    torch = torch_or_skip()
    t = kael.arange(6.0).reshape(2, 3)
    pt = torch.from_dlpack(t)
    pt[0, 0] = 5.0
    assert t[0, 0].item() == 5.0
    back = kael.from_dlpack(torch.arange(4.0))
    assert back.tolist() == [0, 1, 2, 3]
