"""Every row of kael's op tables is a method (NOTE [Op table in Python])."""

import kael


def test_every_op_table_row_is_a_tensor_method():
    table = kael._kael._op_table()
    rows = set(table["unary"]) | set(table["binary"]) | set(table["compare"])
    rows -= set(table["internal"])
    missing = sorted(r for r in rows if not hasattr(kael.Tensor, r))
    assert missing == [], f"op-table rows without a Python method: {missing}"


def test_every_unary_row_has_an_in_place_method():
    table = kael._kael._op_table()
    missing = sorted(r for r in table["unary"] if not hasattr(kael.Tensor, r + "_"))
    assert missing == []


def test_the_table_is_read_from_kael_not_from_the_bindings():
    table = kael._kael._op_table()
    # The lists come from kael_core's tables: a few rows every version has.
    assert {"exp", "gelu_tanh", "elu"} <= set(table["unary"])
    assert {"add", "atan2", "gelu_tanh_backward"} <= set(table["binary"])
    assert {"lt", "logical_xor"} <= set(table["compare"])
