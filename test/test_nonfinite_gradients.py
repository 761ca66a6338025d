"""Gradients through infinite and NaN values, beside PyTorch's.

A gradient that comes in infinite (from log at 0, 1 / x at 0, an inverse function at the edge of its domain) or a
value near the dtype's limit must not turn into NaN where PyTorch gives a number or +-inf: the side of maximum,
minimum or clamp not taken gets 0 (chosen with where, not multiplied by a 0/1 mask), floor, ceil, round and trunc
pass 0, and the one-input functions composed from primitives take PyTorch's derivative formula, g * f'(x)
(gradient_formulas.py), where the chain rule through their steps met inf * 0. Where PyTorch's gradient is NaN, ours
may be a number (float16 formulas run in float32 here, in float16 there).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, dtypes

DTYPES = {"float16": (dtypes.float16, torch.float16), "float32": (dtypes.float32, torch.float32),
          "float64": (dtypes.float64, torch.float64)}  # fmt: skip
EDGES = [-math.inf, -3e38, -1e30, -100.0, -20.0, -3.0, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 3.0, 20.0, 100.0,
         1e30, 3e38, math.inf, math.nan]  # fmt: skip
INCOMING = [0.75, math.inf, -math.inf]


def _assert_like_torch(what: str, ours: np.ndarray, theirs: np.ndarray, inputs: list, tol: float,
                       compared: np.ndarray | None = None) -> None:  # fmt: skip
    """Where PyTorch's is a number or +-inf, ours is the same (numbers within tol); where PyTorch's is NaN, anything.
    At the edge of the range one side overflows where the other just does not (gelu(3e38) is inf in PyTorch, whose
    x * (1 + erf) overflows before the halving): a finite value past max / 64 of the same sign stands for inf."""
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    same = np.isnan(theirs) | (ours == theirs) | (compared is not None and ~compared)
    same |= np.isfinite(ours) & np.isfinite(theirs) & np.isclose(ours, theirs, rtol=tol, atol=tol)
    same |= np.isinf(theirs) & (np.abs(ours) >= np.finfo(np.float32).max / 64) & (np.sign(ours) == np.sign(theirs))
    bad = np.flatnonzero(~same)
    assert not bad.size, (
        f"{what} at {inputs[bad[0]]}: ours {ours[bad[0]]}, PyTorch {theirs[bad[0]]} ({bad.size} differ)"
    )


def _torch_gradients(fn, columns: list[list[float]], incoming: float, dtype) -> tuple[np.ndarray, list[np.ndarray]]:
    theirs = [torch.tensor(c, dtype=dtype, requires_grad=True) for c in columns]
    ref = fn(*theirs)
    (ref * torch.full(ref.shape, incoming, dtype=ref.dtype)).sum().backward()
    return ref.detach().numpy(), [r.grad.numpy() for r in theirs]


def _compare(fn, columns: list[list[float]], incoming: float, dtype: str, tol: float | None = None) -> None:
    """fn of tensors of the columns: values, and the gradients of sum(fn * incoming), beside PyTorch's. With an
    infinite incoming gradient, only where PyTorch's derivative is not 0 or subnormal: inf * 0 is NaN, and inf times
    a value that underflowed has the sign its rounding left (PyTorch's mish'(-100) is +1e-44 from its sigmoid rounded
    to 0 first, where e^x (1 + x) is negative)."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    tol = tol if tol is not None else 1e-2 if dtype == "float16" else 1e-5
    ours = [Tensor(c, dtype=ours_dtype, requires_grad=True) for c in columns]
    out = fn(*ours)
    (out * Tensor.full(out.shape, incoming, dtype=out.dtype)).sum().backward()
    ref, ref_grads = _torch_gradients(fn, columns, incoming, torch_dtype)
    slopes = _torch_gradients(fn, columns, 1.0, torch_dtype)[1] if math.isinf(incoming) else [None] * len(columns)
    inputs = list(zip(*columns))
    _assert_like_torch("value", out.numpy(), ref, inputs, tol)
    for k, (t, r, slope) in enumerate(zip(ours, ref_grads, slopes)):
        compared = None if slope is None else np.abs(slope) >= np.finfo(slope.dtype).tiny
        _assert_like_torch(f"gradient {k} (incoming {incoming})", t.grad.numpy(), r, inputs, tol, compared)


def _both(ours, theirs):
    """One function of Tensors or torch tensors, by the kind of its first argument."""
    return lambda x, *rest: ours(x, *rest) if isinstance(x, Tensor) else theirs(x, *rest)


ONE_INPUT = {
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "tan": lambda x: x.tan(),
    "sinh": lambda x: x.sinh(),
    "cosh": lambda x: x.cosh(),
    "atan": lambda x: x.atan(),
    "asinh": lambda x: x.asinh(),
    "erf": lambda x: x.erf(),
    "asin": lambda x: x.asin(),
    "acos": lambda x: x.acos(),
    "acosh": lambda x: x.acosh(),
    "atanh": lambda x: x.atanh(),
    "gelu": _both(lambda x: x.gelu(), F.gelu),
    "gelu tanh": _both(lambda x: x.gelu(approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "silu": _both(lambda x: x.silu(), F.silu),
    "mish": _both(lambda x: x.mish(), F.mish),
    "logsigmoid": _both(lambda x: x.logsigmoid(), F.logsigmoid),
    "softplus": _both(lambda x: x.softplus(), F.softplus),
    "softplus beta 2": _both(lambda x: x.softplus(2.0, 10.0), lambda x: F.softplus(x, 2.0, 10.0)),
    "hardswish": _both(lambda x: x.hardswish(), F.hardswish),
    "floor": lambda x: x.floor(),
    "ceil": lambda x: x.ceil(),
    "round": lambda x: x.round(),
    "trunc": lambda x: x.trunc(),
    "abs": lambda x: x.abs(),
    "clamp": lambda x: x.clamp(-1.0, 2.0),
    "relu": lambda x: x.relu(),
    "hardtanh": _both(lambda x: x.hardtanh(), F.hardtanh),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("incoming", INCOMING)
@pytest.mark.parametrize("name", list(ONE_INPUT))
def test_one_input_functions_at_the_edges_with_infinite_incoming_gradients_match_pytorch(name, incoming, dtype):
    _compare(ONE_INPUT[name], [EDGES], incoming, dtype)


def test_erf_is_exactly_1_far_out_in_float64_so_gelu_of_a_huge_value_is_itself():
    x = Tensor([4.5, 30.0, 1e300, -1e300], dtype=dtypes.float64)
    assert x.erf().tolist() == [1.0, 1.0, 1.0, -1.0]  # was 1 - 1.5e-8, erf(4) of the fit, past 4
    huge = Tensor([1e300, -1e300], dtype=dtypes.float64)
    assert huge.gelu().tolist() == F.gelu(torch.tensor(huge.numpy())).tolist() == [1e300, -0.0]


PAIRS = [-math.inf, -3e38, -2.0, -0.0, 0.0, 1.0, 2.0, 3e38, math.inf, math.nan]
TWO_INPUTS = {
    "maximum": _both(lambda x, y: x.maximum(y), torch.maximum),
    "minimum": _both(lambda x, y: x.minimum(y), torch.minimum),
    "where": _both(lambda x, y: (x > y).where(x, y), lambda x, y: torch.where(x > y, x, y)),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("incoming", INCOMING + [math.nan])
@pytest.mark.parametrize("name", list(TWO_INPUTS))
def test_the_side_not_taken_gets_0_whatever_comes_in_as_pytorch(name, incoming, dtype):
    columns = [list(c) for c in zip(*itertools.product(PAIRS, PAIRS))]
    _compare(TWO_INPUTS[name], columns, incoming, dtype)


# programs the differential fuzzer found (test/fuzz), each a NaN gradient where PyTorch's is a number
FOUND = {
    "asin of a maximum": (lambda x, y: x.maximum(y).asin(), [[-2.05, 0.074], [2.65625, -0.9296875]]),
    "a floor through a matmul with inf": (
        lambda x, y: x.floor().reshape(2, 2) @ y.reshape(2, 2),
        [[1.7, -2.5, 2.9, 0.5], [1.0, math.inf, -1.5, 2.0]],
    ),
    "a prod of a minimum": (
        lambda x: x.minimum(torch.tensor(-1.0) if isinstance(x, torch.Tensor) else -1).prod(),
        [[-3e38, 2.25, -0.0, math.nan, -math.inf, 3e38, -1.0]],
    ),  # fmt: skip
    "acosh of a masked minimum": (
        _both(
            lambda x, y: (x > 0).where(x.minimum(y), 1.0).acosh(),
            lambda x, y: torch.where(x > 0, x.minimum(y), 1.0).acosh(),
        ),
        [[-0.35, 0.65, 1.36, 2.2], [0.32, 1.61, 2.34, 1.87]],
    ),
    "a power of a hardswish at 0": (
        _both(lambda x, y: x.hardswish() ** y, lambda x, y: F.hardswish(x) ** y),
        [[0.03485, -0.0996, 0.0], [1e-30, 1e-30, 1e-30]],
    ),
    "mish of 3e38": (_both(lambda x: x.mish(), F.mish), [[2.41, 3e38, -2.56]]),
    "logsumexp with inf and 3e38": (lambda x: x.logsumexp(0), [[1.9, -math.inf, 3e38, math.inf, -3e38, 0.0]]),
    "logsumexp of a broadcast maximum with 3e38": (
        lambda x, y: x.reshape(1, 3).maximum(y.reshape(3, 1)).logsumexp((0, 1)),
        [[3e38, 0.96, 0.15], [1.81, -math.inf, 0.44]],
    ),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_programs_the_fuzzer_found_match_pytorch(name):
    fn, columns = FOUND[name]
    _compare(fn, columns, 0.8, "float32")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_the_sign_of_minus_zero_is_plus_zero_as_pytorch(dtype):
    """1 / sign(x) tells the zeros apart: sign(-0.0) is 0.0 in PyTorch (and NumPy), with gradient 0."""
    values = [-0.0, 0.0, -2.0, 3.0, math.nan, -math.inf]
    x = Tensor(values, dtype=DTYPES[dtype][0], requires_grad=True)
    ours = x.sign()
    (ours * 3).sum().backward()
    theirs = torch.tensor(values, dtype=DTYPES[dtype][1]).sign()
    np.testing.assert_array_equal(ours.reciprocal().numpy(), theirs.reciprocal().numpy())
    assert x.grad.tolist() == [0.0] * len(values)


LOGSUMEXP_ROWS = [[-math.inf, -math.inf, -math.inf], [math.inf, 3e38, 1.0], [3e38, 3e38, -2.0], [-3e38, -3e38, -3e38],
                  [-math.inf, 1.0, 2.0], [math.nan, 1.0, 0.0], [0.5, -1.0, 2.0]]  # fmt: skip


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("incoming", INCOMING)
@pytest.mark.parametrize("how", ["rows", "columns of the transpose", "all, kept", "first two rows", "empty rows"])
def test_logsumexp_gradient_is_pytorchs_g_times_exp_of_x_minus_the_result(how, incoming, dtype):
    """PyTorch's g * exp(x - logsumexp): 0 for finite x in a slice whose result is +inf (the chain rule gave
    0 * inf = NaN), 1 for each of two 3e38s whose sum rounded to 3e38 (the chain rule gave softmax's 1/2)."""
    fns = {
        "rows": lambda x: x.reshape(7, 3).logsumexp(1),
        "columns of the transpose": lambda x: x.reshape(7, 3).T.logsumexp(0, keepdim=True),
        "all, kept": lambda x: x.reshape(7, 3)[:, 2:].logsumexp((0, 1), keepdim=True),
        "first two rows": lambda x: x.reshape(7, 3)[:2].logsumexp(-1),
        "empty rows": lambda x: x.reshape(7, 3)[:, :0].logsumexp(1),
    }
    _compare(fns[how], [[v for row in LOGSUMEXP_ROWS for v in row]], incoming, dtype)
