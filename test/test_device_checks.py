"""Checks that kernels make (tensor_checks.py, codegen/checks.py, engine/checks.py): an index outside its dimension
and an integer division by zero raise, with the exception class PyTorch raises and a message naming the op, the value
and the bound, once the kernels of a realize have run; integer division never kills the process; kernels without a
check are unchanged. Compared with PyTorch 2.13 on the CPU."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from glassgrad import Context, Device, GlobalCounters, Tensor, TinyJit, dtypes, nn
from glassgrad.codegen import get_program
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from glassgrad.uop.ops import Ops
from helpers import needs_nvrtc

F = torch.nn.functional


def torch_error(fn) -> Exception:
    """The exception PyTorch raises for `fn` (which must raise)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any class: the test compares it with ours
        return e
    raise AssertionError("PyTorch did not raise")


def raises_like(torch_fn, ours_fn, match: str) -> None:
    """Ours raises an instance of the class PyTorch raises, and an IndexError or ZeroDivisionError, matching `match`.
    (Not pytest.raises: its traceback would keep the failed lazy tensors alive, and a later realize that overwrites a
    buffer they read, the random generator's, realizes them first and raises their error again.)"""
    expected = type(torch_error(torch_fn))
    try:
        ours_fn()
    except expected as error:
        assert isinstance(error, (IndexError, ZeroDivisionError)), type(error).__mro__
        assert re.search(match, str(error)), f"{str(error)!r} does not match {match!r}"
    else:
        pytest.fail(f"no {expected.__name__} was raised")


def ints(values, dtype=dtypes.int32) -> Tensor:
    return Tensor(values, dtype=dtype)


def torch_ints(values, dtype=torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


X = [1.0, 2.0, 3.0]
TABLE = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


# ---- indices out of range raise; in range they match PyTorch ----

OUT_OF_RANGE = {  # name: (torch, ours, message)
    "getitem past the end": (lambda: torch.tensor(X)[torch_ints([0, 3])], lambda: Tensor(X)[ints([0, 3])].tolist(),
                             r"index: index 3 is out of bounds for dimension 0 with size 3"),
    "getitem before -size": (lambda: torch.tensor(X)[torch_ints([-4])], lambda: Tensor(X)[ints([-4])].tolist(),
                             r"index: index -4 is out of bounds for dimension 0 with size 3"),
    "getitem of a second dim": (lambda: torch.tensor(TABLE)[torch_ints([0]), torch_ints([2])],
                                lambda: Tensor(TABLE)[ints([0]), ints([2])].tolist(),
                                r"index: index 2 is out of bounds for dimension 1 with size 2"),
    "gather past the end": (lambda: torch.tensor(X).gather(0, torch_ints([5])),
                            lambda: Tensor(X).gather(0, ints([5])).tolist(),
                            r"gather: index 5 is out of bounds for dimension 0 with size 3"),
    "gather negative": (lambda: torch.tensor(X).gather(0, torch_ints([-1])),
                        lambda: Tensor(X).gather(0, ints([-1])).tolist(),
                        r"gather: index -1 is out of bounds for dimension 0 with size 3"),
    "gather along dim 1": (lambda: torch.tensor(TABLE).gather(1, torch_ints([[0], [2], [1]])),
                           lambda: Tensor(TABLE).gather(1, ints([[0], [2], [1]])).tolist(),
                           r"gather: index 2 is out of bounds for dimension 1 with size 2"),
    "scatter": (lambda: torch.zeros(3).scatter(0, torch_ints([3]), torch.ones(1)),
                lambda: Tensor.zeros(3).scatter(0, ints([3]), Tensor.ones(1)).tolist(),
                r"scatter: index 3 is out of bounds for dimension 0 with size 3"),
    "scatter_reduce": (lambda: torch.zeros(3).scatter_reduce(0, torch_ints([-1]), torch.ones(1), "sum"),
                       lambda: Tensor.zeros(3).scatter_reduce(0, ints([-1]), Tensor.ones(1), "sum").tolist(),
                       r"scatter_reduce: index -1 is out of bounds for dimension 0 with size 3"),
    "one_hot past num_classes": (lambda: F.one_hot(torch_ints([0, 3]), 3), lambda: ints([0, 3]).one_hot(3).tolist(),
                                 r"one_hot: class 3 is outside 0..2"),
    "one_hot negative": (lambda: F.one_hot(torch_ints([-1]), 3), lambda: ints([-1]).one_hot(3).tolist(),
                         r"one_hot: class -1 is outside 0..2"),
    "cross_entropy target past the classes": (
        lambda: F.cross_entropy(torch.zeros(2, 3), torch_ints([0, 3])),
        lambda: Tensor.zeros(2, 3).cross_entropy(ints([0, 3])).item(),
        r"cross_entropy: target 3 is not a class in 0..2 \(nor ignore_index=-100\)"),
    "cross_entropy negative target": (
        lambda: F.cross_entropy(torch.zeros(2, 3), torch_ints([0, -1])),
        lambda: Tensor.zeros(2, 3).cross_entropy(ints([0, -1])).item(), r"cross_entropy: target -1 is not a class"),
    "nll_loss": (lambda: F.nll_loss(torch.zeros(2, 3), torch_ints([4, 0])),
                 lambda: Tensor.zeros(2, 3).nll_loss(ints([4, 0])).item(), r"nll_loss: target 4 is not a class"),
}  # fmt: skip


@pytest.mark.parametrize("case", OUT_OF_RANGE)
def test_an_index_out_of_range_raises_like_torch(device, case):
    torch_fn, ours_fn, message = OUT_OF_RANGE[case]
    raises_like(torch_fn, ours_fn, message)


def test_setitem_with_an_index_out_of_range_raises_like_torch(device):
    def torch_write():
        torch.zeros(3)[torch_ints([1, 5])] = 1.0

    def ours():
        y = Tensor.zeros(3).contiguous()
        y[ints([1, 5])] = 1.0
        y.tolist()

    raises_like(torch_write, ours, r"index: index 5 is out of bounds for dimension 0 with size 3")


# an index into a dimension of size 0: PyTorch raises wherever the broadcast indices hold any, whatever the other
# dimensions select; with none, nothing (no kernel would see the index: raised when the index is given)
INTO_NOTHING = {  # name: (function of (module, index maker), message or None where it selects nothing)
    "getitem": (lambda T, i: T.zeros(0)[i([1])], r"index: index 1 is out of bounds for dimension 0 with size 0"),
    "other dims select nothing": (lambda T, i: T.zeros(0, 0)[:, i([1])], r"index 1 is out of bounds for dimension 1"),
    "an empty slice after it": (lambda T, i: T.zeros(0, 2)[i([0]), :0], r"index 0 is out of bounds for dimension 0"),
    "gather": (lambda T, i: T.zeros(2, 0).gather(1, i([[0], [0]])), r"gather: index 0 is out of bounds for dim"),
    "no index": (lambda T, i: T.zeros(0)[i([])], None),
    "broadcast to no index": (lambda T, i: T.zeros(0, 2)[i([1]), i([])], None),
    "a gather of nothing": (lambda T, i: T.zeros(0, 2).gather(0, i([[]])), None),
    "out of range where nothing is read": (lambda T, i: T.zeros(0, 3)[:, i([5])], None),
}


@pytest.mark.parametrize("case", INTO_NOTHING)
def test_an_index_into_a_size_0_dimension_raises_like_torch(device, case):
    fn, message = INTO_NOTHING[case]
    torch_fn, ours_fn = lambda: fn(torch, torch_ints), lambda: fn(Tensor, ints).numpy()
    if message is not None:
        raises_like(torch_fn, ours_fn, message)
    else:
        np.testing.assert_array_equal(ours_fn(), torch_fn().numpy())


def test_setitem_into_a_size_0_dimension_raises_like_torch(device):
    def torch_write():
        torch.zeros(3, 0)[torch_ints([1, 2]), torch_ints([[0], [0]])] = 1.0

    def ours():
        y = Tensor.zeros(3, 0).contiguous()
        y[ints([1, 2]), ints([[0], [0]])] = 1.0
        y.tolist()

    raises_like(torch_write, ours, r"index: index 0 is out of bounds for dimension 1 with size 0")


@pytest.mark.parametrize("bad", [3, -1])
def test_embedding_ids_outside_the_table_raise_like_torch(device, bad):
    torch_table, table = torch.nn.Embedding(3, 2), nn.Embedding(3, 2)
    raises_like(lambda: torch_table(torch_ints([0, bad])), lambda: table(ints([0, bad])).tolist(),
                rf"Embedding: index {bad} is outside the table's rows 0..2")  # fmt: skip


def test_an_ignored_class_outside_the_classes_is_no_error(device):
    logits = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = F.cross_entropy(torch.tensor(logits), torch_ints([1, 7, 3]), ignore_index=7).item()
    assert Tensor(logits).cross_entropy(ints([1, 7, 3]), ignore_index=7).item() == pytest.approx(want, rel=1e-6)
    want = F.nll_loss(torch.tensor(logits), torch_ints([-100, 2, 0])).item()
    assert Tensor(logits).nll_loss(ints([-100, 2, 0])).item() == pytest.approx(want, rel=1e-6)


def test_float_class_targets_of_cross_entropy_raise_at_the_call_like_torch(device):
    error = torch_error(lambda: F.cross_entropy(torch.zeros(2, 3), torch.tensor([0.0, -0.0])))
    with pytest.raises(type(error), match=r"cross_entropy: class-index targets must be an integer dtype, got "):
        Tensor.zeros(2, 3).cross_entropy(Tensor([0.0, -0.0]))  # not even realized


@pytest.mark.parametrize("bad", [0.5, float("nan"), 3.0, -2.0])
def test_float_class_indices_of_sparse_categorical_crossentropy_are_whole_classes(device, bad):
    """tinygrad's loss takes class indices as floats: -0.0 is class 0; a fraction, NaN or a class past the end is no
    class (PyTorch, which takes no float indices, raises IndexError on the last two as int64)."""
    logits = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    want = F.cross_entropy(torch.tensor(logits), torch_ints([0, 2])).item()
    assert Tensor(logits).sparse_categorical_crossentropy(Tensor([-0.0, 2.0])).item() == pytest.approx(want, rel=1e-6)
    with pytest.raises(IndexError, match=r"sparse_categorical_crossentropy: target .* is not a class in 0..2"):
        Tensor(logits).sparse_categorical_crossentropy(Tensor([0.0, bad])).item()


INDICES = {  # name: (shape of x, index, its dtype)
    "in range": ((3, 4), [[2, 0], [1, 1]], np.int64),
    "negative": ((3, 4), [[-1, -3], [0, -2]], np.int32),
    "exactly -size and size - 1": ((3, 4), [[-3], [2]], np.int16),
    "size 0": ((3, 4), np.zeros((0, 2)), np.int32),
    "one element": ((1, 4), [[0]], np.uint8),
}


@pytest.mark.parametrize("case", INDICES)
def test_getitem_in_range_matches_torch_forward_and_backward(device, case):
    shape, index, dtype = INDICES[case]
    index = np.array(index, dtype=dtype)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    tx, ox = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    t_out, o_out = tx[torch.tensor(index.astype(np.int64))], ox[Tensor(index)]
    np.testing.assert_allclose(o_out.numpy(), t_out.detach().numpy())
    (t_out * 3).sum().backward()
    (o_out * 3).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy())


def test_broadcast_index_tensors_are_checked_after_broadcasting(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows, cols = np.array([[0], [2]]), np.array([[3, -4, 1]])
    want = torch.tensor(x)[torch.tensor(rows), torch.tensor(cols)]
    np.testing.assert_array_equal(Tensor(x)[Tensor(rows), Tensor(cols)].numpy(), want.numpy())
    raises_like(lambda: torch.tensor(x)[torch.tensor(rows), torch_ints([[4, 0, 1]])],
                lambda: Tensor(x)[Tensor(rows), ints([[4, 0, 1]])].tolist(),
                r"index: index 4 is out of bounds for dimension 1 with size 4")  # fmt: skip


@pytest.mark.parametrize("index", [[[1, 0], [0, 1], [1, 1]], np.zeros((3, 0), np.int64)], ids=["2x3", "empty"])
def test_gather_and_embedding_in_range_match_torch_forward_and_backward(device, index):
    index = np.array(index, dtype=np.int64)
    table = np.random.default_rng(3).standard_normal((3, 2)).astype(np.float32)
    tt, ot = torch.tensor(table, requires_grad=True), Tensor(table, requires_grad=True)
    t_out, o_out = tt.gather(1, torch.tensor(index)), ot.gather(1, Tensor(index))
    np.testing.assert_allclose(o_out.numpy(), t_out.detach().numpy())
    t_out.sum().backward()
    o_out.sum().backward()
    np.testing.assert_allclose(ot.grad.numpy(), tt.grad.numpy())
    torch_table, table_layer = torch.nn.Embedding(3, 2), nn.Embedding(3, 2)
    table_layer.weight = Tensor(torch_table.weight.detach().numpy(), requires_grad=True)
    ids = np.array([[2, 0], [1, 2]])
    t_emb, o_emb = torch_table(torch.tensor(ids)), table_layer(Tensor(ids))
    np.testing.assert_allclose(o_emb.numpy(), t_emb.detach().numpy())
    (t_emb * 2).sum().backward()
    (o_emb * 2).sum().backward()
    np.testing.assert_allclose(table_layer.weight.grad.numpy(), torch_table.weight.grad.numpy())


# ---- when the error is raised, and that it is raised once ----


def test_the_error_is_raised_when_realized_and_later_work_runs(device):
    x = Tensor(X)
    bad = x.gather(0, ints([0, 7]) * 1)  # building the graph raises nothing: the values are not known yet
    with pytest.raises(IndexError, match="gather: index 7"):
        bad.realize()
    with pytest.raises(IndexError, match="gather: index 7"):  # still unrealized: realizing it again raises again
        bad.numpy()
    assert x.gather(0, ints([2, 0]) * 1).tolist() == [3.0, 1.0]  # the same kernel on good values: the flag was cleared
    assert (ints([7, 9]) // ints([2, 4])).tolist() == [3, 2]


def test_what_does_not_depend_on_a_failed_check_is_kept(device):
    """An assign realized with a failing lookup ran once: the next realize does not run it again."""
    counter = Tensor([0], dtype=dtypes.int32).contiguous().realize()
    counter.assign(counter + 1)
    looked_up = Tensor(X).gather(0, ints([5]))
    try:
        Tensor.realize(counter, looked_up)
    except IndexError as error:
        assert "gather: index 5" in str(error)
    else:
        pytest.fail("the lookup did not raise")
    assert counter.tolist() == [1]
    with pytest.raises(IndexError, match="gather: index 5"):  # the failed lookup itself is still to compute
        looked_up.tolist()


def test_a_check_costs_no_kernel_and_gathers_stay_one_load(device):
    table, picks = Tensor.arange(997).float().realize(), ints([3, 996, 5]).realize()
    GlobalCounters.reset()
    assert table[picks].tolist() == [3.0, 996.0, 5.0]
    assert GlobalCounters.kernel_count == 1
    with Context(NOOPT=1):
        (item,) = [i for i in table[picks].schedule() if i.ast.op is Ops.SINK]
    spec = get_program(item.ast, Device["CPU"].renderer)
    assert spec.checks and "< 997;" not in spec.src  # checked, and no loop over the table


def test_a_check_that_always_passes_leaves_the_kernel_as_it_was():
    """uint8 ids into 256 rows, and arange's values, cannot fail: the kernel is the one without CHECK nodes."""
    for out in (Tensor.empty(256, 8)[Tensor.empty(5, dtype=dtypes.uint8)], Tensor.empty(8, 4)[Tensor.arange(8)]):
        (item,) = [i for i in out.schedule() if i.ast.op is Ops.SINK]
        unchecked = item.ast.substitute({n: n.src[0] for n in item.ast.toposort() if n.op is Ops.CHECK})
        assert unchecked is not item.ast  # it had a check
        assert get_program(item.ast, Device["CPU"].renderer).src == get_program(unchecked, Device["CPU"].renderer).src


def test_kernels_without_checks_take_no_error_buffer():
    a, b = Tensor.empty(16, 16), Tensor.empty(16, 16)
    for out in (a @ b, (a * 2 + b).exp(), Tensor.empty(256, 8)[Tensor.empty(5, dtype=dtypes.uint8)],
                Tensor.empty(8)[Tensor.arange(8)], Tensor.empty(9, dtype=dtypes.int32) // 3):  # fmt: skip
        for item in out.schedule():
            spec = get_program(item.ast, Device["CPU"].renderer)
            params = spec.src.split("(", 1)[1].split(")", 1)[0]
            assert not spec.checks and "long long*" not in params and "gg_idiv" not in spec.src, spec.src


def test_a_jitted_gather_raises_on_a_bad_replay_and_recovers(device):
    table = Tensor([10.0, 20.0, 30.0]).realize()

    @TinyJit
    def pick(index: Tensor) -> Tensor:
        return table.gather(0, index) * 2

    for good in ([0, 1], [2, 2], [1, 0]):  # runs, captures, replays
        assert pick(ints(good).realize()).tolist() == [table.tolist()[i] * 2 for i in good]
    with pytest.raises(IndexError, match="gather: index 3 is out of bounds for dimension 0 with size 3"):
        pick(ints([0, 3]).realize())
    assert pick(ints([2, 1]).realize()).tolist() == [60.0, 40.0]


def test_a_lookup_of_values_no_load_reads_is_checked_too(device):
    """A one-hot pick of a constant or of arange's values reads no memory at the index: its select tests it."""
    raises_like(lambda: torch.ones(5)[torch_ints([1, 7])], lambda: Tensor.ones(5)[ints([1, 7])].tolist(),
                r"index: index 7 is out of bounds for dimension 0 with size 5")  # fmt: skip
    assert Tensor.arange(5)[ints([1, -2])].tolist() == [1, 3]


def test_an_int64_index_past_2_to_the_32_is_no_other_index(device):
    """Index math is int32: before checks, 2**32 + 1 read element 1."""
    x = Tensor([1.0, 2.0, 3.0])
    raises_like(lambda: torch.tensor(X).gather(0, torch_ints([2**32 + 1])),
                lambda: x.gather(0, Tensor([2**32 + 1], dtype=dtypes.int64)).tolist(),
                r"gather: index 4294967297 is out of bounds for dimension 0 with size 3")  # fmt: skip


# ---- checks where values stand for nothing: padding, and a gather of a gather ----


def test_a_gather_of_a_gather_checks_the_indices_it_reads(device):
    """Fused into one kernel, w[i1][i2] reads i1 only at i2's positions: those are checked (PyTorch, which computes
    w[i1] whole, also raises for a bad element of i1 that i2 does not pick; glassgrad does not look at it)."""
    w = Tensor([10.0, 20.0, 30.0])
    assert w[ints([2, 0, 1])][ints([1, 2])].tolist() == [10.0, 20.0]
    raises_like(lambda: torch.tensor([10.0, 20.0, 30.0])[torch_ints([2, 5, 1])][torch_ints([1, 2])],
                lambda: w[ints([2, 5, 1])][ints([1, 2])].tolist(),
                r"index: index 5 is out of bounds for dimension 0 with size 3")  # fmt: skip


def test_a_division_under_padding_does_not_check_the_padding(device):
    a, b = ints([7, -7, 9]), ints([2, 3, -4])
    assert (a // b).pad((2, 1)).tolist() == [0, 0, 3, -3, -3, 0]
    assert Tensor(X)[ints([2, 0])].pad((1, 1)).tolist() == [0.0, 3.0, 1.0, 0.0]


def test_checked_values_on_vector_lanes(device):
    n = 1000  # long enough for vector lanes on the CPU
    a, b = np.arange(n, dtype=np.int32) - 500, np.arange(n, dtype=np.int32) % 7 + 1
    np.testing.assert_array_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
    b[617] = 0
    with pytest.raises(ZeroDivisionError, match="floordiv: integer division by zero"):
        (Tensor(a) // Tensor(b)).numpy()
    classes = np.arange(n) % 10
    np.testing.assert_array_equal(Tensor(classes).one_hot(10).numpy(), np.eye(10, dtype=np.int64)[classes])
    classes[801] = 10
    with pytest.raises(IndexError, match="one_hot: class 10 is outside 0..9"):
        Tensor(classes).one_hot(10).numpy()


# ---- integer division: PyTorch's results, ZeroDivisionError, and never a trap ----

SIGNED = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]
TORCH = {dtypes.int8: torch.int8, dtypes.int16: torch.int16, dtypes.int32: torch.int32, dtypes.int64: torch.int64,
         dtypes.uint8: torch.uint8}  # fmt: skip


@pytest.mark.parametrize("dtype", SIGNED, ids=str)
def test_min_divided_by_minus_one_matches_torch(device, dtype):
    values = [dtypes.min(dtype), -7, 7, dtypes.max(dtype)]
    ta, a = torch.tensor(values, dtype=TORCH[dtype]), Tensor(values, dtype=dtype)
    minus_one = Tensor([-1] * 4, dtype=dtype)  # a tensor: the kernel does not know the divisor
    assert (a // minus_one).tolist() == (ta // -1).tolist()
    assert (a % minus_one).tolist() == (ta % -1).tolist()
    assert (a // -1).tolist() == (ta // -1).tolist()  # a constant divisor
    assert a.div(minus_one, rounding_mode="trunc").tolist() == [-v if v != dtypes.min(dtype) else v for v in values]


@pytest.mark.parametrize("dtype", [*SIGNED, dtypes.uint8], ids=str)
@pytest.mark.parametrize("op", ["//", "%", "trunc", "floor"])
def test_integer_division_by_zero_raises_like_torch(device, dtype, op):
    fn = {"//": lambda a, b: a // b, "%": lambda a, b: a % b, "trunc": lambda a, b: a.div(b, rounding_mode="trunc"),
          "floor": lambda a, b: a.div(b, rounding_mode="floor")}[op]  # fmt: skip
    error = torch_error(lambda: fn(torch.tensor([5, 6], dtype=TORCH[dtype]), torch.tensor([1, 0], dtype=TORCH[dtype])))
    with pytest.raises(type(error), match="integer division by zero") as info:
        fn(Tensor([5, 6], dtype=dtype), Tensor([1, 0], dtype=dtype)).tolist()
    assert isinstance(info.value, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):  # a constant 0: at once, as PyTorch
        fn(Tensor([5, 6], dtype=dtype), 0)


@pytest.mark.parametrize("dtype", [dtypes.uint16, dtypes.uint32, dtypes.uint64], ids=str)
def test_unsigned_division_by_zero_raises(device, dtype):
    """PyTorch 2.13 has no floor division of these dtypes on the CPU; NumPy's results where the divisor is not 0."""
    a, b = np.array([7, dtypes.max(dtype), 0], np.uint64), np.array([2, 3, 5], np.uint64)
    assert (Tensor(a.tolist(), dtype=dtype) // Tensor(b.tolist(), dtype=dtype)).tolist() == (a // b).tolist()
    assert (Tensor(a.tolist(), dtype=dtype) % Tensor(b.tolist(), dtype=dtype)).tolist() == (a % b).tolist()
    with pytest.raises(ZeroDivisionError, match="mod: integer division by zero"):
        (Tensor(a.tolist(), dtype=dtype) % Tensor([2, 0, 5], dtype=dtype)).tolist()


def test_the_python_device_interprets_a_failing_division_without_raising_inside():
    a = Tensor([5, 6], dtype=dtypes.int32, device="PYTHON")
    with pytest.raises(ZeroDivisionError, match="mod: integer division by zero"):
        (a % Tensor([0, 1], dtype=dtypes.int32, device="PYTHON")).tolist()
    assert (a % Tensor([4, -4], dtype=dtypes.int32, device="PYTHON")).tolist() == [1, -2]


EDGE_CASES = [  # (expression, what it prints: a result, or the exception's class names)
    ("Tensor([-2**31], dtype=dtypes.int32) // Tensor([-1], dtype=dtypes.int32)", "[-2147483648]"),
    ("Tensor([-2**31], dtype=dtypes.int32) % Tensor([-1], dtype=dtypes.int32)", "[0]"),
    ("Tensor([-2**31], dtype=dtypes.int32).div(Tensor([-1], dtype=dtypes.int32), rounding_mode='trunc')",
     "[-2147483648]"),
    ("Tensor([-2**63], dtype=dtypes.int64) // Tensor([-1], dtype=dtypes.int64)", "[-9223372036854775808]"),
    ("Tensor([-2**63], dtype=dtypes.int64) % Tensor([-1], dtype=dtypes.int64)", "[0]"),
    ("Tensor([-2**31], dtype=dtypes.int32) // -1", "[-2147483648]"),
    ("Tensor([-2**31], dtype=dtypes.int32) % -1", "[0]"),
] + [(f"Tensor([3], dtype=dtypes.{t}) {op} Tensor([0], dtype=dtypes.{t})", "DivisionByZeroError ZeroDivisionError")
     for t in ("int8", "int32", "int64", "uint8", "uint32") for op in ("//", "%")]  # fmt: skip


@pytest.mark.parametrize("device_name", ["CPU", "PYTHON"])
def test_no_integer_edge_case_kills_the_process(device_name):
    """Each case in a process of its own: before, the CPU kernel of int32 MIN // -1 died of SIGFPE."""
    script = textwrap.dedent(f"""
        from glassgrad import Device, Tensor, dtypes
        Device.DEFAULT = {device_name!r}
        for expression in {[e for e, _ in EDGE_CASES]!r}:
            try:
                print(eval(expression).tolist())
            except Exception as e:
                print(type(e).__name__, *[c.__name__ for c in type(e).__mro__ if c.__name__ == "ZeroDivisionError"])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.splitlines() == [want for _, want in EDGE_CASES], done.stdout


# ---- CUDA: the checks and the division helpers render and compile (NVRTC, no GPU needed) ----


@needs_nvrtc
def test_cuda_kernels_with_checks_compile():
    a, b = Tensor.empty(4096, dtype=dtypes.int32), Tensor.empty(4096, dtype=dtypes.int64)
    outs = [
        a // b.cast(dtypes.int32),
        a % 3 + (b % a.cast(dtypes.int64)),
        Tensor.empty(50, 64)[a.reshape(64, 64)],
        nn.Embedding(50, 16)(b.reshape(64, 64)).sum(-1),
        Tensor.empty(64, 10).float().cross_entropy(b[:64]),
    ]
    renderer, compiler = CUDARenderer(), ops_cuda.NVRTCCompiler("sm_90")
    compiled = 0
    for out in outs:
        for item in out.schedule():
            if item.ast.op is not Ops.SINK:
                continue
            spec = get_program(item.ast, renderer)
            assert compiler.compile(spec.src), spec.src
            compiled += bool(spec.checks)
    assert compiled >= 5


def test_a_reduction_loop_with_a_check_stays_a_loop_on_a_gpu():
    """The stores that record a failure are no output: a reduction's loop that holds one (an index read inside it)
    does not become part of the grid, and an output loop with one at its head still does."""
    ids = Tensor.empty(64, 64, dtype=dtypes.int32)
    for out, outputs in ((Tensor.empty(50)[ids].sum(-1), 64), (Tensor.empty(50, 64)[ids[:, 0]], 64 * 64)):
        with Context(NOOPT=1):
            (item,) = [i for i in out.schedule() if i.ast.op is Ops.SINK]
        spec = get_program(item.ast, CUDARenderer(), ())
        assert spec.checks and spec.global_size == (outputs,), (spec.global_size, spec.src)


def test_a_failed_realize_left_alive_does_not_raise_in_an_unrelated_tinyjit_step():
    """A division by zero that failed (its tensor kept alive, as an exception's traceback keeps it) raises again
    when that tensor is realized, not in the first call of an unrelated TinyJit step with an optimizer (which
    realizes the step's own pending assigns)."""
    failed = Tensor([5, 6], dtype=dtypes.int8) // Tensor([1, 0], dtype=dtypes.int8)
    with pytest.raises(ZeroDivisionError):
        failed.tolist()
    w = Tensor(np.ones((3, 2), np.float32), requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.5)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (x @ w).sum().backward()
        opt.step()
        return loss.realize()

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tw = torch.ones(3, 2, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.5)
    for _ in range(3):
        topt.zero_grad()
        (torch.tensor(x) @ tw).sum().backward()
        topt.step()
        step(Tensor(x)).item()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy())
    with pytest.raises(ZeroDivisionError, match="floordiv: integer division by zero"):
        failed.tolist()  # its own error, again
