"""var, std, var_mean and std_mean beside PyTorch, at the extremes too.

PyTorch's CPU variance accumulates float32 in float64 (half and bfloat16 in float32) and takes std's root before
rounding back, so a std whose variance overflows the dtype is finite (of 3e38 in float32, of 60000 in float16); its
gradient is PyTorch's formula in the dtype, 2 (x - mean) / (N - correction) (std's times g / (2 std)), none through
the mean, so values with an inf give +-inf gradients, not NaN everywhere; with N <= correction and no dim given, it
is g * inf (NaN where x equals the mean), as PyTorch's var_backward.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

DTYPES = {"float16": (dtypes.float16, torch.float16), "bfloat16": (dtypes.bfloat16, torch.bfloat16),
          "float32": (dtypes.float32, torch.float32), "float64": (dtypes.float64, torch.float64)}  # fmt: skip
TOL = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12}
# PyTorch's float16 and bfloat16 gradient formulas round each step to the dtype (x - mean among them); ours run in
# float32, rounded once
GRAD_TOL = TOL | {"float16": 2e-2, "bfloat16": 4e-2}


def _assert_same(what: str, ours: np.ndarray, theirs: np.ndarray, tol: float) -> None:
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    same = (np.isnan(ours) & np.isnan(theirs)) | (ours == theirs)
    same |= np.isfinite(ours) & np.isfinite(theirs) & np.isclose(ours, theirs, rtol=tol, atol=tol)
    assert same.all(), f"{what}: ours {ours[~same]}, PyTorch {theirs[~same]}"


def _compare(name: str, values, dtype: str, weight=None, **kwargs) -> None:
    """name(**kwargs) of values: the value, and the gradient of its sum times `weight`, beside PyTorch's."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    x = np.asarray(values, dtype=np.float64)
    t = torch.tensor(x, dtype=torch_dtype, requires_grad=True)
    o = Tensor(t.detach().float().numpy() if dtype == "bfloat16" else t.detach().numpy(), dtype=ours_dtype,
               requires_grad=True)  # fmt: skip
    ref, out = getattr(torch, name)(t, **kwargs), getattr(o, name)(**kwargs)
    ref, out = (ref[0], out[0]) if isinstance(ref, tuple) else (ref, out)
    w = np.full(tuple(ref.shape), 0.7) if weight is None else np.broadcast_to(weight, tuple(ref.shape))
    (ref * torch.tensor(w, dtype=torch_dtype)).sum().backward()
    (out * Tensor(w, dtype=dtypes.float64).cast(ours_dtype)).sum().backward()
    _assert_same(f"{name} value", out.float().numpy(), ref.detach().float().numpy(), TOL[dtype])
    _assert_same(f"{name} gradient", o.grad.float().numpy(), t.grad.float().numpy(), GRAD_TOL[dtype])


NAMES = ["var", "std", "var_mean", "std_mean"]
SHAPES = [(5,), (1,), (3, 4), (2, 3, 5), (4, 1, 3)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES)
def test_random_values_match_pytorch_forward_and_backward(shape, name, dtype):
    x = np.random.default_rng(len(shape)).standard_normal(shape) * 3
    for kwargs in ({}, {"dim": -1}, {"dim": 0, "keepdim": True}, {"correction": 0}, {"dim": tuple(range(len(shape)))}):
        _compare(name, x, dtype, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_a_non_contiguous_view_and_an_empty_tensor_match_pytorch(name):
    x = np.random.default_rng(7).standard_normal((4, 6))
    t, o = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    ref, out = getattr(torch, name)(t.T[::2], dim=1), getattr(o.T[::2], name)(dim=1)
    ref, out = (ref[0], out[0]) if isinstance(ref, tuple) else (ref, out)
    ref.sum().backward()
    out.sum().backward()
    _assert_same("value", out.numpy(), ref.detach().numpy(), 1e-12)
    _assert_same("gradient", o.grad.numpy(), t.grad.numpy(), 1e-12)
    empty = getattr(Tensor.zeros(0, 3), name)(dim=0)
    empty = empty[0] if isinstance(empty, tuple) else empty
    want = getattr(torch, name)(torch.zeros(0, 3), dim=0)
    _assert_same("empty", empty.numpy(), (want[0] if isinstance(want, tuple) else want).numpy(), 0)


EXTREMES = {  # name: (values, dtypes)
    "an inf among finite values": ([0.05, -0.8, 2.0, -math.inf, 0.1], ["float16", "float32", "float64"]),
    "+inf and -inf": ([1.0, math.inf, -math.inf], ["float32", "float64"]),
    "a NaN": ([1.0, math.nan, 2.0], ["float32"]),
    "a square past float32's range": ([-0.16, -0.25, -2.44, 3e38], ["float32"]),
    "a sum of squares past float32's range": ([1.5e19, -1.5e19], ["float32"]),
    "a square past float16's range": ([60000.0, 0.0, 0.0, 0.0], ["float16"]),
    "twice the std past float32's range": ([3e38, 2.0], ["float32"]),  # PyTorch's g / (2 std) is 0
}


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("case", list(EXTREMES))
def test_values_with_an_inf_or_near_the_dtype_limit_match_pytorch(case, name):
    values, names = EXTREMES[case]
    for dtype in names:
        for correction in (0, 1):
            _compare(name, values, dtype, correction=correction)
            _compare(name, [values, values[::-1]], dtype, correction=correction, dim=1)


@pytest.mark.parametrize("name", ["var", "std"])
def test_as_many_or_fewer_values_than_the_correction_match_pytorch(name):
    _compare(name, [2.0], "float32")  # no dim given, N = correction: NaN where x is the mean
    _compare(name, [2.0, 3.0], "float32", correction=3)  # g * inf, whatever the sign of x - mean
    _compare(name, [2.0, 3.0, 4.0], "float32", correction=5)
    _compare(name, math.nan, "bfloat16")
    _compare(name, [[2.0], [5.0]], "float32", dim=1)
    _compare(name, [2.0, 3.0], "float32", dim=0, correction=2)  # 2 / 0 * (x - mean): -inf and inf
    _compare(name, [2.0, 3.0, 5.0], "float32", dim=0, correction=4)  # 2 / -1 * (x - mean)
    _compare(name, 4.0, "float32", correction=0)
    _compare(name, 4.0, "float32")
