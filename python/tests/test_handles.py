"""A kael.Tensor is a handle: assignment, views, versions (NOTE [Python
handles])."""

import pytest

import kael


def test_assignment_is_the_same_tensor(device):
    a = kael.zeros(3, device=device)
    b = a
    b.add_(1.0)
    assert a.tolist() == [1.0, 1.0, 1.0]
    assert b.is_same(a)


def test_view_shares_storage_and_is_not_the_same_tensor(device):
    a = kael.arange(6.0, device=device).reshape(2, 3)
    v = a.t()
    assert v.shares_storage(a)
    assert not v.is_same(a)
    assert v.is_view() and v.base is not None


def test_write_through_a_view_is_seen_by_the_base(device):
    a = kael.zeros(2, 3, device=device)
    a.t()[2, 1] = 5.0
    assert a.tolist() == [[0, 0, 0], [0, 0, 5]]


def test_in_place_ops_bump_the_version_once(device):
    a = kael.ones(4, device=device)
    v0 = a.version
    a.mul_(2.0)
    a[1:3] = 0.0
    a.exp_()
    assert a.version == v0 + 3
    assert a._version == a.version


def test_version_is_shared_by_views(device):
    a = kael.ones(4, device=device)
    v = a[1:]
    v.add_(1.0)
    assert a.version == v.version == 1


def test_clone_copies_and_deep_clone_is_the_same(device):
    a = kael.arange(4.0, device=device)
    c = a.clone()
    d = a.deep_clone()
    c.add_(10.0)
    assert a.tolist() == [0, 1, 2, 3]
    assert not c.shares_storage(a) and not d.shares_storage(a)


def test_views_keep_shape_strides_and_offset(device):
    a = kael.arange(24.0, device=device).reshape(2, 3, 4)
    s = a[1, 1:3, 1:4]
    assert s.shape == (2, 3)
    assert s.stride() == (4, 1)
    assert s.storage_offset() == 17
    assert s.shares_storage(a)


def test_expand_view_dtype_and_as_strided_are_views(device):
    a = kael.arange(3.0, device=device)
    e = a.expand(2, 3)
    assert e.stride() == (0, 1) and e.shares_storage(a)
    i = a.view(kael.int32)
    assert i.dtype == kael.int32 and i.shares_storage(a)
    s = kael.arange(6.0, device=device).as_strided((2, 2), (1, 2), 1)
    assert s.tolist() == [[1, 3], [2, 4]]


def test_reshape_of_a_non_contiguous_tensor_copies(device):
    a = kael.arange(6.0, device=device).reshape(2, 3).t()
    r = a.reshape(6)
    assert r.tolist() == [0, 3, 1, 4, 2, 5]
    assert not r.shares_storage(a)


def test_explain_describes_the_layout(device):
    a = kael.arange(6.0, device=device).reshape(2, 3).t()
    text = a.explain()
    assert "shape" in text and "[3, 2]" in text


def test_repr_shows_values_like_pytorch():
    a = kael.arange(6.0).reshape(2, 3)
    assert repr(a) == "tensor([[0., 1., 2.],\n        [3., 4., 5.]])"
    assert "dtype=kael.float64" in repr(a.double())
    assert "requires_grad=True" in repr(kael.ones(2, requires_grad=True))


def test_repr_summarises_large_tensors():
    text = repr(kael.zeros(10000))
    assert "..." in text and len(text) < 200


def test_dtypes_and_devices_are_python_objects():
    assert kael.float32.itemsize == 4 and kael.float32.is_floating_point
    assert repr(kael.int64) == "kael.int64"
    assert kael.zeros(2, dtype="float64").dtype == kael.float64
    assert kael.zeros(2, device=kael.cpu).device == kael.cpu
    assert kael.zeros(2).device == kael.get_default_device()


def test_to_changes_dtype_and_device():
    a = kael.arange(3.0, device=kael.cpu)
    b = a.to(kael.threaded, kael.float64)
    assert b.device == kael.threaded and b.dtype == kael.float64
    assert a.to(kael.float32).is_same(a)


def test_len_iter_and_conversions(device):
    a = kael.arange(6.0, device=device).reshape(3, 2)
    assert len(a) == 3
    assert [r.tolist() for r in a] == [[0, 1], [2, 3], [4, 5]]
    assert float(a[2, 1]) == 5.0 and int(a[1, 1]) == 3
    assert a[0, 1].item() == 1.0
    assert kael.tensor(7).item() == 7


def test_repr_spells_bools_and_exponents_as_pytorch():
    r = repr(kael.tensor([True, False]))
    assert "True" in r and "False" in r and "true" not in r, r
    text = repr(kael.tensor([1.0, 1e30]))
    assert "e+30" in text and "e+00" in text, text
    assert "e-05" in repr(kael.tensor([1e-5, 1.0]))


def test_cuda_is_reported_unavailable_with_a_reason_when_absent():
    if kael.cuda_available():
        assert kael.cuda.type == "cuda"
        return
    with pytest.raises(Exception) as info:
        kael.cuda
    assert "cuda" in str(info.value).lower()
