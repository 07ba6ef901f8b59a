"""`t[key]` makes views like numpy's basic indexing; assignment writes
through them (NOTE [Python indexing])."""

import numpy as np
import pytest

import kael

KEYS = [
    1,
    -1,
    slice(None),
    slice(1, None),
    slice(None, None, 2),
    slice(1, 3, 2),
    (1, 2),
    (slice(None), 1),
    (Ellipsis, 1),
    (None, 1),
    (1, None, slice(1, 3)),
    (slice(None), None, Ellipsis, 2),
    (Ellipsis,),
    (slice(5, 10),),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_basic_index_is_a_view_with_numpy_values(device, key):
    a = np.arange(24.0).reshape(2, 3, 4)
    k = kael.tensor(a, dtype=kael.float64, device=device)
    got = k[key]
    want = a[key]
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()
    assert got.shares_storage(k)


def test_integer_list_index_gathers(device):
    k = kael.arange(10.0, device=device)
    assert k[[1, 3, 3]].tolist() == [1.0, 3.0, 3.0]
    idx = kael.tensor([0, 2], device=device)
    assert k.reshape(5, 2)[idx].tolist() == [[0, 1], [4, 5]]


def test_assignment_writes_through_the_view(device):
    k = kael.zeros(3, 4, device=device)
    k[1] = 1.0
    k[:, ::2] = kael.tensor([5.0, 6.0], device=device)
    k[2, 1:3] = [7.0, 8.0]
    want = np.zeros((3, 4))
    want[1] = 1
    want[:, ::2] = [5, 6]
    want[2, 1:3] = [7, 8]
    assert k.tolist() == want.tolist()
    assert k.version == 3


def test_negative_steps_are_refused():
    with pytest.raises(ValueError, match="flip"):
        kael.arange(4.0)[::-1]


def test_out_of_range_index_is_an_index_error():
    with pytest.raises(IndexError):
        kael.arange(4.0)[4]
    with pytest.raises(IndexError, match="too many"):
        kael.arange(4.0)[0, 0]


def test_an_out_of_range_tensor_index_names_the_range():
    with pytest.raises(IndexError, match="out of range"):
        kael.zeros(3)[kael.tensor([5])]


def test_a_0d_integer_tensor_indexes_like_an_int():
    k = kael.arange(4.0)
    assert k[kael.tensor(2)].item() == 2.0 and k[kael.tensor(2)].ndim == 0


def test_huge_python_ints_are_refused_not_wrapped():
    with pytest.raises((IndexError, TypeError, OverflowError)):
        kael.zeros(3)[2**70]
