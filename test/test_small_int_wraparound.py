"""Every integer op's result keeps its dtype's width (wrapping around, as NumPy's), also where it is not stored: C
computes int8/uint8/int16/uint16 math in int, so an unstored 255 + 1 was 256 when compared, cast wider or summed
(a uint8 `% 3` of a wrapped difference gave 257; summed, 325,150 where NumPy has 30)."""

import numpy as np
import pytest

from glassgrad import Tensor, dtypes
from glassgrad.uop.alu import exec_alu
from glassgrad.uop.ops import Ops

SMALL_INTS = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32}

# (ours, NumPy's) on two operands; divisors are never 0 and never -1 (integer division's own edge cases)
OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "neg": (lambda a, b: -a, lambda a, b: -a),
    "invert": (lambda a, b: ~a, lambda a, b: ~a),
    "shl": (lambda a, b: a << 3, lambda a, b: a << a.dtype.type(3)),
    "shr_of_product": (lambda a, b: (a * b) >> 2, lambda a, b: (a * b) >> a.dtype.type(2)),
    "mod_of_difference": (lambda a, b: (a - b) % 3, lambda a, b: (a - b) % a.dtype.type(3)),
    "idiv_of_product": (lambda a, b: (a * b) // 7, lambda a, b: (a * b) // a.dtype.type(7)),
    "mod_by_tensor": (lambda a, b: (a + a) % b, lambda a, b: (a + a) % b),
}

# how the result is used: each of these once read the int's unwrapped bits
USES = {
    "stored": (lambda t: t, lambda x: x),
    "compared": (lambda t: t < 5, lambda x: x < 5),
    "cast_wider": (lambda t: t.cast(dtypes.int64), lambda x: x.astype(np.int64)),
    "summed": (lambda t: t.sum(dtype=dtypes.int64), lambda x: x.astype(np.int64).sum()),
    "max": (lambda t: t.max(), lambda x: x.max()),
}


def _operands(np_dtype, shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(np_dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, shape, endpoint=True).astype(np_dtype)
    b = rng.integers(info.min, info.max, shape, endpoint=True).astype(np_dtype)
    b[(b == 0) | (b == -1)] = 3  # no division by 0, no INT_MIN // -1
    return a, b


@pytest.mark.parametrize("use", list(USES))
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("name", list(SMALL_INTS))
def test_small_int_results_wrap_as_numpys(device, name, op, use):
    np_dtype = SMALL_INTS[name]
    a, b = _operands(np_dtype, (37,))
    ours_op, numpy_op = OPS[op]
    ours_use, numpy_use = USES[use]
    with np.errstate(all="ignore"):
        expected = numpy_use(numpy_op(a, b))
    got = ours_use(ours_op(Tensor(a), Tensor(b))).numpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint16"])
def test_vector_kernels_wrap_too(device, name):
    """Rows long enough for vector lanes, read transposed, each result compared and summed unstored."""
    np_dtype = SMALL_INTS[name]
    a, b = _operands(np_dtype, (67, 64), seed=1)
    with np.errstate(all="ignore"):
        expected = ((a.T * b.T + a.T) % np_dtype(5)).astype(np.int64).sum(1), (-(a.T << np_dtype(1)) < b.T).sum(1)
    x, y = Tensor(a).T, Tensor(b).T
    got = ((x * y + x) % 5).sum(1, dtype=dtypes.int64), (-(x << 1) < y).sum(1)
    np.testing.assert_array_equal(got[0].numpy(), expected[0])
    np.testing.assert_array_equal(got[1].numpy(), expected[1])


def test_the_fuzzers_uint8_mod(device):
    """The differential run's case: a uint8 % 3 of a wrapped value, summed (NumPy: 30)."""
    a = np.arange(0, 250, 10, dtype=np.uint8)
    b = np.full(25, 200, np.uint8)
    with np.errstate(all="ignore"):
        expected = ((a - b) % np.uint8(3)).astype(np.int64).sum()
    got = ((Tensor(a) - Tensor(b)) % 3).sum(dtype=dtypes.int64).item()
    assert got == expected


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "uint16"])
def test_constant_folding_wraps_as_the_kernels(device, name):
    """exec_alu (constant folding and the PYTHON device) and compiled kernels agree: a folded 200 * 3 of uint8 is
    what a kernel computes from a buffer."""
    np_dtype = SMALL_INTS[name]
    dtype = getattr(dtypes, name)
    value = np.iinfo(np_dtype).max - 1
    folded = Tensor.full((3,), int(value), dtype=dtype) * 3 + 7
    computed = Tensor(np.full(3, value, np_dtype)) * 3 + 7
    with np.errstate(all="ignore"):
        expected = np.full(3, value, np_dtype) * np_dtype(3) + np_dtype(7)
    np.testing.assert_array_equal(folded.numpy(), expected)
    np.testing.assert_array_equal(computed.numpy(), expected)
    assert exec_alu(Ops.MUL, dtype, [int(value), 3]) == (np.full(1, value, np_dtype) * np_dtype(3))[0]
    lowest = np.array([np.iinfo(np_dtype).min], np_dtype)
    with np.errstate(all="ignore"):
        assert exec_alu(Ops.NEG, dtype, [int(lowest[0])]) == (-lowest)[0]


def test_int32_and_int64_data_math_wraps_in_generated_source():
    """int and long long overflow is undefined in C and CUDA (NVRTC computed an overflowing (a + a) % b in 64 bits):
    data values are computed in the unsigned type, index math keeps its signed form."""
    from glassgrad.codegen import get_program
    from glassgrad.renderer.cuda import CUDARenderer

    for dtype, unsigned in ((dtypes.int32, "unsigned int"), (dtypes.int64, "unsigned long long")):
        t = (Tensor.empty(37, dtype=dtype) + Tensor.empty(37, dtype=dtype)) * 3
        (item,) = [i for i in t.schedule() if i.ast.op is Ops.SINK]
        src = get_program(item.ast, CUDARenderer()).src
        assert f"(({unsigned})val0)*3" in src, src
        assert "ridx0 = gidx" in src and "(unsigned int)gidx" not in src  # the thread's index stays signed


def test_integer_max_loops_stay_rolled_on_cuda():
    """NVIDIA's ptxas (-O3) lost a term of a fully unrolled max over negated ints (37 int32 values: the second largest);
    the CUDA renderer keeps integer max and min loops rolled (test_small_int_results_wrap_as_numpys checks the values
    on a GPU), float ones as they were."""
    from glassgrad.codegen import get_program
    from glassgrad.renderer.cuda import CUDARenderer

    def source(t: Tensor) -> str:
        (item,) = [i for i in t.schedule() if i.ast.op is Ops.SINK]
        return get_program(item.ast, CUDARenderer()).src

    for dtype in (dtypes.int32, dtypes.int16, dtypes.uint8):
        assert "#pragma unroll 1" in source((-Tensor.empty(37, dtype=dtype)).max())
        assert "#pragma unroll 1" in source(Tensor.empty(37, dtype=dtype).min())
    assert "#pragma unroll 1" not in source(Tensor.empty(37).max()) + source(Tensor.empty(37, dtype=dtypes.int32).sum())
