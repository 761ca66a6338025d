"""Values and gradients at the edges of their domains, element by element beside PyTorch, in float16/32/64.

The inverse functions (acosh, atanh, asin, acos) and pow take PyTorch's derivative formulas, so their gradients
are +-inf, numbers or NaN where PyTorch's are, never a NaN from 0 * inf in the chain rule through the composition;
sigmoid stays finite for every input.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes

DTYPES = {"float16": (dtypes.float16, torch.float16), "float32": (dtypes.float32, torch.float32),
          "float64": (dtypes.float64, torch.float64)}  # fmt: skip
# zero of both signs, +-1, +-inf, tiny and huge (past float16's range), the edges of the domains, and NaN
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, math.inf, -math.inf, 1e-30, -1e-30, 1e-5, 1e30,
         -1e30, 100.0, -100.0, 1000.0, -1000.0, 30.0, -30.0, 0.9999, 1.0001, math.nan]  # fmt: skip


def _assert_same(name: str, what: str, ours: np.ndarray, theirs: np.ndarray, inputs: list, tol: float) -> None:
    """Equal NaNs and infinities (with their signs), numbers within tol, naming the first input that differs."""
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    same = (np.isnan(ours) & np.isnan(theirs)) | (ours == theirs)
    same |= np.isfinite(ours) & np.isfinite(theirs) & np.isclose(ours, theirs, rtol=tol, atol=tol)
    bad = np.flatnonzero(~same)
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{name} {what} at {inputs[i]}: ours {ours[i]}, PyTorch {theirs[i]} "
                             f"({bad.size} of {same.size} differ)")  # fmt: skip


def _compare(name: str, fn, columns: list[list[float]], dtype: str) -> None:
    """fn over tensors of the columns (each input requires grad): values and the gradient of their sum."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    tol = 5e-3 if dtype == "float16" else 1e-5  # PyTorch's float16 formulas round in float16: 950 for 947.8
    ours = [Tensor(c, dtype=ours_dtype, requires_grad=True) for c in columns]
    theirs = [torch.tensor(c, dtype=torch_dtype, requires_grad=True) for c in columns]
    out, ref = fn(*ours), fn(*theirs)
    out.sum().backward()
    ref.sum().backward()
    inputs = list(zip(*columns))
    _assert_same(name, "value", out.numpy(), ref.detach().numpy(), inputs, tol)
    for k, (t, r) in enumerate(zip(ours, theirs)):
        _assert_same(name, f"gradient {k}", t.grad.numpy(), r.grad.numpy(), inputs, tol)


UNARY = {
    "acosh": lambda x: x.acosh(),
    "atanh": lambda x: x.atanh(),
    "asin": lambda x: x.asin(),
    "acos": lambda x: x.acos(),
    "asinh": lambda x: x.asinh(),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_values_and_gradients_at_the_edges_match_pytorch(name, dtype):
    _compare(name, UNARY[name], [EDGES], dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_sigmoid_of_extreme_inputs_is_0_or_1_with_gradient_0(dtype):
    x = Tensor([-1000.0, 1000.0, -1e4, 1e4, -math.inf, math.inf], dtype=DTYPES[dtype][0], requires_grad=True)
    y = x.sigmoid()
    y.sum().backward()
    assert y.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0] and x.grad.tolist() == [0.0] * 6


# x ** n for a Python number n: products for small whole n, sqrt and rsqrt for +-0.5, the general formula otherwise
EXPONENTS = [0, 1, 2, 3, -1, -2, 0.5, -0.5, 1.5, 2.5, 0.3, -1.5, 40, 41, 100.0]


def _bases_for(n: float, dtype: str) -> list[float]:
    """The edge values as bases of x ** n, but for those where PyTorch's dtypes disagree among themselves: for
    exponents +-0.5 and negative zeros or -inf (float32 and float64 take sqrt and rsqrt, which give -0, -inf and
    NaN there, float16 C's pow, which gives +0, +inf and 0), and for 1.5 at -inf (whose gradient reads
    (-inf) ** 0.5 the same two ways). We give sqrt's values, and C's pow in the gradient."""
    negative_zero_or_inf = {-0.0, -1e-30, -1e30, -math.inf}  # -1e-30 and -1e30 are -0 and -inf in float16
    if n in (0.5, -0.5):
        return [b for b in EDGES if not (b in negative_zero_or_inf and math.copysign(1, b) < 0)]
    if n == 1.5 and dtype != "float16":
        return [b for b in EDGES if b != -math.inf]
    return EDGES


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", EXPONENTS)
def test_power_by_a_number_at_the_edges_matches_pytorch(n, dtype):
    _compare(f"x ** {n}", lambda x: x**n, [_bases_for(n, dtype)], dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("base", [0.0, 1.0, 2.0, -2.0, 0.5])
def test_a_number_to_a_tensor_power_at_the_edges_matches_pytorch(base, dtype):
    _compare(f"{base} ** y", lambda y: base**y, [EDGES], dtype)


BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, 1e-30, 3.0, -3.0, math.nan]
POWERS = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, 2.5, math.inf, -math.inf, 0.3, math.nan]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_tensor_to_a_tensor_power_at_the_edges_matches_pytorch_in_both_gradients(dtype):
    pairs = list(itertools.product(BASES, POWERS))
    _compare("x ** y", lambda x, y: x**y, [[b for b, _ in pairs], [p for _, p in pairs]], dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_power_gradients_round_each_step_as_pytorch(dtype):
    """PyTorch's formula y * x ** (y - 1) runs in the dtype: 60000 - 1 rounds to 60000 in float16, so the gradient
    of a negative base is +inf (times g), not -inf; 3 * 40000 overflows before g scales it."""
    ours_dtype, torch_dtype = {
        "float16": (dtypes.float16, torch.float16),
        "bfloat16": (dtypes.bfloat16, torch.bfloat16),
    }[dtype]
    bases, powers = [-2.66, 2.05, 0.5, 40000.0, -3.0, 0.0], [60000.0, 60000.0, 3.0, 3.0, 2.5, -1.5]
    x, y = Tensor(bases, dtype=ours_dtype, requires_grad=True), Tensor(powers, dtype=ours_dtype, requires_grad=True)
    tx, ty = (
        torch.tensor(bases, dtype=torch_dtype, requires_grad=True),
        torch.tensor(powers, dtype=torch_dtype, requires_grad=True),
    )
    w = [-0.4, 0.7, -0.5, 1e-3, 0.3, 0.2]
    (x**y * Tensor(w, dtype=ours_dtype)).sum().backward()
    (tx**ty * torch.tensor(w, dtype=torch_dtype)).sum().backward()
    inputs = list(zip(bases, powers))
    _assert_same("x ** y", "value", (x**y).float().numpy(), (tx**ty).detach().float().numpy(), inputs, 0)
    _assert_same("x ** y", "gradient in x", x.grad.float().numpy(), tx.grad.float().numpy(), inputs, 0)
    _assert_same("x ** y", "gradient in y", y.grad.float().numpy(), ty.grad.float().numpy(), inputs, 0)


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 1, 4)])
def test_power_gradients_broadcast_and_match_pytorch_on_random_values(shape):
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-2, 2, shape).astype(np.float32), rng.uniform(-3, 3, shape[-1:]).astype(np.float32)
    x[..., ::2] = np.abs(x[..., ::2])  # real powers where the base is positive, NaN (as PyTorch) where it is not
    _compare(
        "x ** y", lambda a, b: a**b, [x.reshape(-1).tolist(), np.broadcast_to(y, shape).reshape(-1).tolist()], "float32"
    )
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ey, ty = Tensor(y, requires_grad=True), torch.tensor(y, requires_grad=True)
    (ours**ey).sum().backward()
    (theirs**ty).sum().backward()
    np.testing.assert_allclose(ey.grad.numpy(), ty.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_a_rule_survives_when_a_tensor_below_it_was_realized():
    x = Tensor([0.0, 1.0, 4.0], requires_grad=True)
    inner = x * 1  # requires grad, realized: autograd substitutes the graph that built it back in
    inner.realize()
    inner.pow(0.3).sum().backward()
    t = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    (t * 1).pow(0.3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_square_gradient_of_huge_values_stays_finite(dtype: str) -> None:
    """square is x * x: its gradient g * x + g * x is finite wherever the true 2 * x * g is (PyTorch's x * x), where
    torch.square's (2 * x) * g overflows first (fuzz seed 4818: x = -3e38, g = -0.0065)."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    big = {"float16": 4e4, "float32": 3e38, "float64": 1.5e308}[dtype]
    xs, gs = [-big, big, 2.0, -0.0], [-0.0065, 0.25, -1.5, 3.0]
    x = Tensor(xs, dtype=ours_dtype, requires_grad=True)
    (x.square() * Tensor(gs, dtype=ours_dtype)).sum().backward()
    tx = torch.tensor(xs, dtype=torch_dtype, requires_grad=True)
    ((tx * tx) * torch.tensor(gs, dtype=torch_dtype)).sum().backward()
    ours, theirs = x.grad.numpy(), tx.grad.numpy()
    assert np.isfinite(theirs).all()
    _assert_same("square", "gradient", ours, theirs, xs, {"float16": 1e-3}.get(dtype, 1e-6))
