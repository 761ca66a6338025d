"""Float // and % beside PyTorch, exactly: from C's exact fmod (Ops.MOD of floats), so a quotient within a rounding of
a whole number floors right, and the special values (+-inf, NaN, 0 divisors, signed zeros) come out as PyTorch's.

They were floor(x * (1 / y)) and x - that * y: 2.0 % -inf was NaN (PyTorch -inf), inf // 1.77 was inf (NaN), the
gradient of x % 0 was NaN (1), bfloat16 2.71875 // 0.388671875 was 7 (6), float16 253 % -0.4399 was 0 (-0.4062).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from glassgrad.uop.ops import Ops
from helpers import needs_nvrtc

DTYPES = {"float32": (dtypes.float32, torch.float32), "float64": (dtypes.float64, torch.float64),
          "float16": (dtypes.float16, torch.float16), "bfloat16": (dtypes.bfloat16, torch.bfloat16)}  # fmt: skip
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.83, 7.0, 0.1, 1e30, -1e-30, math.inf, -math.inf, math.nan]
# PyTorch's vectorized CPU fmod (its % too) gives NaN where x / y overflows the dtype (1e30 % -1e-30 in float32);
# its scalar path, C's fmod and glassgrad give the exact remainder, which float64 holds: the reference computes there
OPS = {
    "floordiv": (lambda a, b: a // b, lambda a, b: a // b),
    "mod": (lambda a, b: a % b, lambda a, b: torch.remainder(*_in_float64(a, b))),
    "div floor": (lambda a, b: a.div(b, rounding_mode="floor"), lambda a, b: a.div(b, rounding_mode="floor")),
}


def _in_float64(a, b) -> tuple[torch.Tensor, torch.Tensor]:
    """Both sides in float64, a Python number rounded to the tensor's dtype first (as glassgrad takes it)."""
    dtype = a.dtype if isinstance(a, torch.Tensor) else b.dtype
    return tuple((t if isinstance(t, torch.Tensor) else torch.tensor(t, dtype=dtype)).double() for t in (a, b))


def _same(ours: Tensor, theirs: torch.Tensor) -> None:
    """Equal values (a quotient past 2**24 within an ulp: glassgrad divides as x * (1 / y)), NaN where PyTorch has
    NaN, and the sign of every zero."""
    wide = ours.dtype == dtypes.float64
    got = (ours if wide else ours.float()).numpy()
    want = theirs.to(torch.float64 if wide else torch.float32)
    if ours.dtype in (dtypes.float16, dtypes.bfloat16):  # a float64 reference rounded once to the 16-bit dtype
        want = want.to(torch.float16 if ours.dtype == dtypes.float16 else torch.bfloat16).float()
    want = want.numpy()
    np.testing.assert_allclose(got, want, rtol=2 * np.finfo(got.dtype).eps, atol=0)
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


def _ours(t: torch.Tensor, dtype) -> Tensor:
    return Tensor((t.float() if t.dtype == torch.bfloat16 else t).numpy(), dtype=dtype)


def _pairs(values: list[float]) -> tuple[list[float], list[float]]:
    return [a for a in values for _ in values], [b for _ in values for b in values]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", list(OPS))
def test_every_pair_of_special_values_as_pytorch(device, op, dtype):
    ours_dtype, torch_dtype = DTYPES[dtype]
    x, y = _pairs(SPECIAL)
    ours, theirs = OPS[op]
    got = ours(Tensor(x, dtype=ours_dtype), Tensor(y, dtype=ours_dtype))
    _same(got, theirs(torch.tensor(x, dtype=torch_dtype), torch.tensor(y, dtype=torch_dtype)))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["floordiv", "mod"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 33), (3, 1, 5)])
def test_quotients_near_whole_numbers_as_pytorch(device, op, dtype, shape):
    """x = k * y, give or take an ulp: where x * (1 / y) rounds across the whole number, the floor would miss."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    rng = np.random.default_rng(0)
    y = torch.tensor(rng.uniform(-3, 3, shape), dtype=torch_dtype)
    k = torch.tensor(rng.integers(-600, 600, shape), dtype=torch.float64)
    x = (k * y.double()).to(torch_dtype)
    x = torch.where(torch.tensor(rng.random(shape) < 0.3), torch.nextafter(x, x.new_tensor(math.inf)), x)
    ours, theirs = OPS[op]
    got = ours(_ours(x, ours_dtype), _ours(y, ours_dtype))
    _same(got, theirs(x, y))


@pytest.mark.parametrize("scalar", [2.0, -0.4399, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("op", ["floordiv", "mod"])
def test_a_python_number_on_either_side(device, op, scalar):
    x = [253.0, -2.83, 0.0, -0.0, 5.5, math.inf]
    ours, theirs = OPS[op]
    _same(ours(Tensor(x), scalar), theirs(torch.tensor(x), scalar))
    _same(ours(scalar, Tensor(x)), theirs(scalar, torch.tensor(x)))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_remainder_gradients_as_pytorch(device, dtype):
    """d(x % y)/dx = 1 (also where y is 0), d/dy = -(x // y) (+-inf where y is 0)."""
    ours_dtype, torch_dtype = DTYPES[dtype]
    x, y = _pairs([3.0, -2.0, 0.5, 2.0, -7.25])
    y = [v if i % 5 else 0.0 for i, v in enumerate(y)]
    w = np.random.default_rng(1).uniform(-1, 1, len(x)).astype(np.float32)
    tx, ty = (
        torch.tensor(x, dtype=torch_dtype, requires_grad=True),
        torch.tensor(y, dtype=torch_dtype, requires_grad=True),
    )
    ((tx % ty).float() * torch.tensor(w)).sum().backward()
    gx, gy = Tensor(x, dtype=ours_dtype, requires_grad=True), Tensor(y, dtype=ours_dtype, requires_grad=True)
    grads = ((gx % gy).float() * Tensor(w)).sum().gradient(gx, gy)
    np.testing.assert_allclose(grads[0].float().numpy(), tx.grad.float().numpy(), rtol=1e-2)
    np.testing.assert_allclose(grads[1].float().numpy(), ty.grad.float().numpy(), rtol=1e-2)


def test_floor_division_has_no_gradient_as_pytorchs_rounded_div(device):
    x, y = Tensor([3.0, -2.0, 5.0], requires_grad=True), Tensor([2.0, 0.0, -1.5], requires_grad=True)
    grads = (x // y).sum().gradient(x, y)
    tx, ty = torch.tensor([3.0, -2.0, 5.0], requires_grad=True), torch.tensor([2.0, 0.0, -1.5], requires_grad=True)
    tx.div(ty, rounding_mode="floor").sum().backward()
    assert [g.tolist() for g in grads] == [tx.grad.tolist(), ty.grad.tolist()]


@pytest.mark.parametrize("op", ["floordiv", "mod", "div floor"])
def test_bool_tensors_cannot_be_divided(op):
    with pytest.raises(TypeError, match="bool tensors cannot be divided"):
        OPS[op][0](Tensor([True, False]), Tensor([True, True]))
    with pytest.raises(NotImplementedError):
        OPS[op if op != "mod" else "floordiv"][1](torch.tensor([True, False]), torch.tensor([True, True]))
    with pytest.raises(NotImplementedError):
        torch.tensor([True, False]) % torch.tensor([True, True])


@needs_nvrtc
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_cuda_kernels_of_float_divmod_compile(dtype):
    """Ops.MOD of floats renders as fmodf / fmod (half and bfloat16 in float32), also in vector lanes."""
    a, b = Tensor.empty(4096, dtype=DTYPES[dtype][0]), Tensor.empty(4096, dtype=DTYPES[dtype][0])
    renderer, compiler = CUDARenderer(), ops_cuda.NVRTCCompiler("sm_90")
    for out in (a // b, a % b, a % 2.5):
        (item,) = [item for item in out.schedule() if item.ast.op is Ops.SINK]
        spec = get_program(item.ast, renderer)
        assert "fmod" in spec.src and compiler.compile(spec.src), spec.src
