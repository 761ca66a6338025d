"""A check survives the algebra that drops its value (codegen/checks.py keep_dropped_checks), beside PyTorch.

Simplifying a kernel drops what no output needs: x // y * 0 is 0 for ints, x[i] % 1 is 0, and a divisor built from
constants folds to one. The checks inside went with it, so an integer division by zero or an index out of range gave
numbers (int16 % Tensor(False) gave 32766; PyTorch raises for every divisor and index it is given).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.codegen.checks import drop_checks, keep_dropped_checks, passed_checks
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from glassgrad.uop.check import Check
from glassgrad.uop.ops import Ops, UOp
from glassgrad.uop.rewrite import graph_rewrite
from glassgrad.uop.symbolic import symbolic
from helpers import needs_nvrtc


def _grid(n: int = 64):
    return lambda t: t.arange(n * n).reshape(n, n)


# (name, the same program for either framework `t` (the Tensor class or the torch module)): each must raise
RAISING = {
    "x // y * 0": lambda t: t.tensor([1, 2, 3]) // t.tensor([0, 1, 1]) * 0,
    "x % y with y = 3 - 3": lambda t: t.tensor([5, 6]) % (t.tensor(3) - 3),
    "int16 % False": lambda t: t.tensor(32766, dtype=t.int16) % t.tensor(False),
    "x[i] * 0": lambda t: t.tensor([1, 2, 3])[t.tensor([5])] * 0,
    "x[i] % 1": lambda t: t.tensor([1, 2, 3])[t.tensor([5])] % 1,
    "(x[i] < 5) & False": lambda t: (t.tensor([1.0, 2, 3])[t.tensor([5])] < 5) & False,
    "x[i].sum() * 0": lambda t: t.tensor([1, 2, 3])[t.tensor([1, 5, 7])].sum() * 0,
    "vector lanes": lambda t: (_grid()(t) // (_grid()(t) % 7)) * 0,
    "vector lanes, summed": lambda t: ((_grid()(t) // (_grid()(t) % 7)) * 0).sum(0),
    "a table read in a sum": lambda t: t.ones(8, 16, dtype=t.int32)[t.arange(64) % 9].sum(1) * 0,
}


def _ours(program):
    return program(_AsTorch)


class _AsTorch:
    """The few torch names the programs use, in glassgrad."""

    int16, int32 = dtypes.int16, dtypes.int32
    tensor = staticmethod(lambda data, dtype=None: Tensor(data, dtype=dtype))
    arange = staticmethod(Tensor.arange)
    ones = staticmethod(lambda *shape, dtype=None: Tensor.ones(*shape, dtype=dtype))


@pytest.mark.parametrize("name", list(RAISING))
def test_a_failing_check_whose_value_no_output_needs_still_raises(device, name):
    with pytest.raises((RuntimeError, IndexError, ZeroDivisionError)):
        RAISING[name](torch)
    with pytest.raises((IndexError, ZeroDivisionError)):
        _ours(RAISING[name]).tolist()


@pytest.mark.parametrize("n", [1, 3, 64])
def test_checks_that_pass_keep_the_values_of_pytorch(device, n):
    ours = _ours(lambda t: ((_grid(n)(t) // (_grid(n)(t) % 7 + 1)) * 0).sum(0) + t.arange(n)[t.arange(n)])
    theirs = ((torch.arange(n * n).reshape(n, n) // (torch.arange(n * n).reshape(n, n) % 7 + 1)) * 0).sum(0)
    np.testing.assert_array_equal(ours.numpy(), (theirs + torch.arange(n)).numpy())


def test_a_dropped_check_becomes_a_source_of_the_sink_in_its_loops():
    """The rule alone: x // y * 0 over a (4, 8) grid simplifies to stores of 0; the check of y stays, in a REDUCE
    over the loop that no store is in when the output is summed."""
    x = Tensor.empty(4, 8, dtype=dtypes.int32)
    (item,) = [i for i in ((x // x.flip(0)) * 0).sum(1).schedule() if i.ast.op is Ops.SINK]
    lowered, simplify = lower_kernel(item.ast, ()), symbolic + passed_checks
    simplified = graph_rewrite(lowered, simplify)
    assert not any(u.op is Ops.CHECK for u in simplified.toposort())
    kept = keep_dropped_checks(lowered, simplified, simplify)
    assert kept.src[: len(simplified.src)] == simplified.src
    (extra,) = kept.src[len(simplified.src) :]
    assert extra.op is Ops.REDUCE and extra.src[0].op is Ops.CHECK and len(extra.src) == 2


@needs_nvrtc
@pytest.mark.parametrize("name", ["vector lanes", "vector lanes, summed", "a table read in a sum"])
def test_kernels_with_kept_checks_compile_for_cuda(name):
    checks = 0
    for item in _ours(RAISING[name]).schedule():
        if item.ast.op is Ops.SINK:
            spec = get_program(item.ast, CUDARenderer())
            assert ops_cuda.NVRTCCompiler("sm_90").compile(spec.src), spec.src
            checks += len(spec.checks)
    assert checks


def test_drop_checks_rule_gives_each_check_its_value():
    """codegen/checks.py drop_checks alone: CHECK(x, ok) and CHECK(x) are x, under other nodes too."""
    x = UOp(Ops.SPECIAL, dtypes.int32, (), ("i", 8))
    check = Check("index {value} out of range", dtypes.int32, low=0, high=4)
    checked = UOp(Ops.CHECK, dtypes.int32, (x, x < 4), check)
    assert drop_checks.rewrite(checked) is x
    assert drop_checks.rewrite(UOp(Ops.CHECK, dtypes.int32, (x,), check)) is x
    assert drop_checks.rewrite(x) is None
    assert graph_rewrite((checked + 1) * UOp(Ops.CHECK, dtypes.int32, (x,), check), drop_checks) is (x + 1) * x
