"""The fp8 dtypes (dtypes.fp8e4m3, dtypes.fp8e5m2): casts to and from every float type against PyTorch's
float8_e4m3fn and float8_e5m2, bit for bit, on every device; the C and CUDA sources compile; the dtype helpers
tinygrad scripts use (DType.min/max, least_upper_dtype, truncate as a dict)."""

import math

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes
from glassgrad.codegen import get_program
from glassgrad.dtype import least_upper_dtype, promote_types, to_dtype, truncate
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.runtime import ops_cuda
from helpers import needs_nvrtc

FP8 = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
FLOATS = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32,
          dtypes.float64: torch.float64}  # fmt: skip
BITS = {1: (dtypes.uint8, torch.uint8), 2: (dtypes.uint16, torch.uint16), 4: (dtypes.uint32, torch.uint32),
        8: (dtypes.uint64, torch.uint64)}  # fmt: skip


def _ours_from_bits(bits: np.ndarray, dtype) -> Tensor:
    """A tensor of `dtype` holding exactly these bit patterns."""
    return Tensor(bits).bitcast(dtype)


def _bits(t: Tensor) -> list[int]:
    return t.bitcast(BITS[t.dtype.itemsize][0]).tolist()


def _to(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t.to(dtype) as PyTorch 2.13 (the project's reference) converts: float8_e4m3fn saturates at +-448, inf too.
    Older PyTorch (2.11 on the GPU machine) gave NaN past 448; clamping first gives 2.13's bits on either."""
    if dtype is not torch.float8_e4m3fn:
        return t.to(dtype)
    # integers through float64 (exact to 2**53): int32 -2**31 has no int32 abs, so it would pass the clamp unclamped
    wide = (
        t.float() if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else t if t.is_floating_point() else t.double()
    )
    return torch.where(wide.abs() > 448, wide.clamp(-448, 448), wide).to(dtype)  # NaNs as they were


def _torch_bits(t: torch.Tensor) -> list[int]:
    return t.view(BITS[t.element_size()][1]).tolist()


def _same_values(ours: list[float], theirs: list[float]) -> bool:
    """Equal, NaN matching NaN and -0.0 matching only -0.0."""
    return all((math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
               for a, b in zip(ours, theirs))  # fmt: skip


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
@pytest.mark.parametrize("dst", list(FLOATS) + list(FP8), ids=str)
def test_every_fp8_bit_pattern_casts_to_every_float_type_as_torch(device, fp8, dst):
    bits = np.arange(256, dtype=np.uint8)
    ours = _ours_from_bits(bits, fp8).cast(dst)
    theirs = _to(torch.from_numpy(bits).view(FP8[fp8]), FLOATS.get(dst) or FP8[dst])
    # the values (each finite fp8 value has one bit pattern; a NaN's payload is not kept on the PYTHON device)
    assert _same_values(ours.cast(dtypes.float64).tolist(), theirs.double().tolist())


def _awkward(torch_dtype: torch.dtype, n: int) -> torch.Tensor:
    """Random bit patterns of a float type (every exponent: huge, tiny, subnormal, inf, NaN of either sign) and
    values near the fp8 ranges, ties between fp8 neighbours among them."""
    rng = np.random.default_rng(0)
    width = torch.finfo(torch_dtype).bits
    raw = torch.from_numpy(rng.integers(0, 2**width, n, dtype=np.uint64).astype(f"uint{width}")).view(torch_dtype)
    near = rng.standard_normal(n) * 2.0 ** rng.integers(-20, 18, n)
    ties = (np.arange(1, 65) + 0.5) * np.repeat(2.0 ** np.arange(-12, 12, 3), 64 // 8 + 1)[:64]
    edges = [448.0, 449.0, 464.0, 464.5, 480.0, 57344.0, 61440.0, 61441.0, 65536.0, 2.0**-9, 2.0**-10, 3 * 2.0**-10,
             2.0**-16, 2.0**-17, 1 + 2**-4, 1 + 2**-4 + 2**-30, 0.0, -0.0, math.inf, -math.inf, math.nan]  # fmt: skip
    values = torch.tensor(np.concatenate([near, ties, -ties, edges]), dtype=torch.float64).to(torch_dtype)
    return torch.cat([raw, values])


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
@pytest.mark.parametrize("src", list(FLOATS), ids=str)
def test_floats_of_every_type_cast_to_fp8_as_torch_rounds_and_saturates(device, fp8, src):
    n = 2000 if device == "PYTHON" else 20000
    theirs = _awkward(FLOATS[src], n)
    ours = Tensor(theirs.view(BITS[theirs.element_size()][1]).numpy()).bitcast(src).cast(fp8)
    assert _bits(ours) == _torch_bits(_to(theirs, FP8[fp8]))


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
def test_integers_cast_to_and_from_fp8_as_torch(device, fp8):
    ints = torch.tensor([0, 1, -1, 7, 17, 300, -300, 1000, 2**20, -(2**31)], dtype=torch.int32)
    assert _bits(Tensor(ints.numpy()).cast(fp8)) == _torch_bits(_to(ints, FP8[fp8]))
    finite = [b for b in range(256) if math.isfinite(float(torch.tensor([b], dtype=torch.uint8).view(FP8[fp8])))]
    bits = np.array(finite, dtype=np.uint8)
    for dst, torch_dst in ((dtypes.int32, torch.int32), (dtypes.int64, torch.int64), (dtypes.bool, torch.bool)):
        assert (
            _ours_from_bits(bits, fp8).cast(dst).tolist()
            == torch.from_numpy(bits).view(FP8[fp8]).to(torch_dst).tolist()
        )


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
def test_an_fp8_tensor_from_python_values_holds_what_torch_holds(device, fp8):
    values = [0.0, -0.0, 1.0, 0.3, -2.7, 100.0, 500.0, 1e-4, 1e6, -1e6]
    ours = Tensor(values, dtype=fp8)
    theirs = _to(torch.tensor(values, dtype=torch.float32), FP8[fp8])
    assert ours.dtype == fp8 and _bits(ours) == _torch_bits(theirs)
    assert _same_values(ours.tolist(), theirs.float().tolist())
    assert _same_values(ours.numpy().tolist(), theirs.float().tolist())  # NumPy has no fp8: float32, as bfloat16


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
def test_math_on_fp8_runs_in_float32_and_rounds_back(device, fp8):
    x = _to(torch.tensor([0.5, 1.0, 3.0, -6.0, 200.0, 0.3], dtype=torch.float32), FP8[fp8]).float()
    ours = Tensor(x.numpy()).cast(fp8)
    # torch has no fp8 math: each op in float32, rounded to fp8 after it, as glassgrad computes it
    expected = _to(_to(x * 3, FP8[fp8]).float() + x, FP8[fp8])
    assert (ours * 3 + ours).dtype == fp8 and _bits(ours * 3 + ours) == _torch_bits(expected)
    assert _bits(ours.sum()) == _torch_bits(_to(x.sum(), FP8[fp8]))  # a sum accumulates in float32, rounds once


@pytest.mark.parametrize("fp8", list(FP8), ids=str)
def test_a_gradient_flows_through_an_fp8_round_trip_as_in_torch(fp8):
    values = [[0.3, -2.0, 7.7], [100.0, 1e-3, -0.5]]
    ours = Tensor(values, requires_grad=True)
    theirs = torch.tensor(values, requires_grad=True)
    (ours.cast(fp8).cast(dtypes.float32) * Tensor([1.0, 2.0, 3.0])).sum().backward()
    (theirs.to(FP8[fp8]).float() * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@needs_nvrtc
@pytest.mark.parametrize("fp8", list(FP8), ids=str)
@pytest.mark.parametrize("other", list(FLOATS) + [dtypes.int32], ids=str)
def test_cuda_source_of_fp8_casts_and_math_compiles(fp8, other):
    x = Tensor.empty(64, dtype=other, device="CPU")
    for t in (x.cast(fp8), (x.cast(fp8) * 2).cast(other), x.cast(fp8).cast(dtypes.fp8e5m2 if fp8 != dtypes.fp8e5m2
                                                                         else dtypes.fp8e4m3)):  # fmt: skip
        spec = get_program(t.schedule()[-1].ast, CUDARenderer())
        assert ops_cuda.NVRTCCompiler("sm_80").compile(spec.src)


def test_fp8_dtypes_have_tinygrad_and_torch_names():
    assert dtypes.fp8s == (dtypes.fp8e4m3, dtypes.fp8e5m2) and repr(dtypes.fp8e4m3) == "dtypes.fp8e4m3"
    assert to_dtype("float8_e4m3fn") == dtypes.fp8e4m3 and to_dtype("float8_e5m2") == dtypes.fp8e5m2
    assert dtypes.is_float(dtypes.fp8e5m2) and dtypes.fp8e4m3.itemsize == 1
    assert all(d in dtypes.floats for d in dtypes.fp8s)


def test_dtype_min_and_max_are_properties_as_in_tinygrad():
    assert dtypes.int8.min == -128 and dtypes.int8.max == 127 and dtypes.uint16.max == 65535
    assert dtypes.bool.min is False and dtypes.bool.max is True
    assert dtypes.float32.min == -math.inf and dtypes.fp8e4m3.max == math.inf
    assert dtypes.int64.min == torch.iinfo(torch.int64).min and dtypes.uint32.max == torch.iinfo(torch.uint32).max


def test_least_upper_dtype_is_torchs_promotion_and_meets_fp8s_at_half():
    assert least_upper_dtype(dtypes.int8, dtypes.uint8) == dtypes.int16 == promote_types(dtypes.int8, dtypes.uint8)
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert least_upper_dtype(dtypes.bool, dtypes.int32, dtypes.float16) == dtypes.float16
    assert least_upper_dtype(dtypes.float32) == dtypes.float32
    for a, b in ((torch.int8, torch.uint8), (torch.int32, torch.float16), (torch.bool, torch.int64)):
        ours = least_upper_dtype(to_dtype(str(a).split(".")[1]), to_dtype(str(b).split(".")[1]))
        assert ours == to_dtype(str(torch.promote_types(a, b)).split(".")[1])
    # PyTorch refuses fp8 promotions; tinygrad's lattice: fp8 with an int is the fp8, the two fp8s meet at half
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) == dtypes.float16
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.int64) == dtypes.fp8e4m3
    assert least_upper_dtype(dtypes.fp8e5m2, dtypes.bfloat16) == dtypes.bfloat16
    with pytest.raises(TypeError, match="at least one"):
        least_upper_dtype()


def test_truncate_is_a_dict_keyed_by_dtype_and_a_function():
    assert truncate[dtypes.int8](200) == -56 == truncate(dtypes.int8, 200)
    assert truncate[dtypes.float16](65520.0) == math.inf
    assert truncate[dtypes.float32](0.1) == float(np.float32(0.1))
    assert truncate[dtypes.fp8e4m3](1000.0) == 448.0 and truncate[dtypes.fp8e5m2](1e6) == math.inf
    assert truncate[dtypes.bool](3) is True
    assert set(truncate) >= {dtypes.bfloat16, dtypes.uint64, *dtypes.fp8s}
