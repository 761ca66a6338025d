"""Comparisons, bool logic and selects on C vectors (renderer/cstyle.py, CRenderer.render_vector_alu): a comparison's
mask becomes a bool vector of 0s and 1s, a select blends its values' bits through the mask. Each against NumPy, with
the vector lanes forced (UPCAST of the only axis) over the values where lanes disagree: NaN, signed zeros,
infinities, equal values."""

import numpy as np
import pytest

from glassgrad import Context, Tensor, dtypes
from glassgrad.codegen.opt import Opt
from glassgrad.engine.realize import buffer_of
from test_opt_actions import run

pytestmark = pytest.mark.usefixtures("on_the_cpu")  # the CPU renderer's vectors, whatever the default device is

SPECIAL = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, 1.5, 3.0, -1e-30, 7.0, np.nan, 2.0, -2.0, 0.5, 9.0])
NUMPY = {dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.int32: np.int32, dtypes.int8: np.int8,
         dtypes.int64: np.int64, dtypes.uint8: np.uint8}  # fmt: skip


def values(dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtypes.is_float(dtype):
        return np.resize(rng.permutation(SPECIAL), n).astype(NUMPY[dtype])
    return rng.integers(0, 5, n).astype(NUMPY[dtype])  # few values: many equal pairs


def vectorized(out: Tensor, lanes: int) -> np.ndarray:
    """`out`'s single kernel run with its axis split into `lanes` vector lanes."""
    with Context(NOOPT=1):
        (item,) = out.schedule()
    for b in item.bufs[1:]:
        buffer_of(b).ensure_allocated()
    raw = run(item, [Opt("UPCAST", 0, lanes)], threads=1).tobytes()  # run() reads the output as float32
    return np.frombuffer(raw, dtype=np.bool_ if out.dtype == dtypes.bool else NUMPY[out.dtype])


CASES = {
    "select on less-than": (lambda x, y, a, b: (x < y).where(a, b), lambda x, y, a, b: np.where(x < y, a, b)),
    "select on not-equal": (lambda x, y, a, b: (x != y).where(a, b), lambda x, y, a, b: np.where(x != y, a, b)),
    "relu": (lambda x, y, a, b: x.relu(), lambda x, y, a, b: np.where(x <= 0, 0, x).astype(x.dtype)),
    "bool logic stored": (
        lambda x, y, a, b: ((x < y) | (a == b)) & ((x != a) ^ (y <= b)),
        lambda x, y, a, b: ((x < y) | (a == b)) & ((x != a) ^ (y <= b)),
    ),
    "select of bools": (
        lambda x, y, a, b: (x < a).where(y < b, x == y),
        lambda x, y, a, b: np.where(x < a, y < b, x == y),
    ),
}


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
@pytest.mark.parametrize("dtype", list(NUMPY), ids=str)
@pytest.mark.parametrize("case", CASES)
def test_vector_compares_and_selects_match_numpy(case, dtype, lanes):
    n = 48
    arrays = [values(dtype, n, seed) for seed in range(4)]
    ours, numpy_fn = CASES[case]
    if case == "relu" and not dtypes.is_float(dtype) and dtype not in (dtypes.int32, dtypes.int64, dtypes.int8):
        pytest.skip("relu of an unsigned integer is the value itself")
    got = vectorized(ours(*(Tensor(a).realize() for a in arrays)), lanes)
    expected = numpy_fn(*arrays)
    np.testing.assert_array_equal(got, expected)
    if dtypes.is_float(dtype) and got.dtype.kind == "f":  # the select copied bits: the sign of a zero survives
        assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_a_vector_relu_is_rendered_as_whole_vector_ops():
    from glassgrad import Device
    from glassgrad.codegen import get_program

    with Context(NOOPT=1):
        (item,) = Tensor(values(dtypes.float32, 64, 0)).realize().relu().schedule()
    src = get_program(item.ast, Device["CPU"].renderer, (Opt("UPCAST", 0, 16),)).src
    assert "__builtin_convertvector" in src and "[15]" not in src  # no lane written out on its own


def test_a_select_widens_its_mask_as_signed_bytes():
    """GCC 12 moves a bool vector's lanes one by one (16 byte moves and inserts a select) when it zero-extends the
    mask a comparison just narrowed; negated as signed bytes and sign-extended, it stays a few vector instructions."""
    from glassgrad import Device
    from glassgrad.codegen import get_program

    with Context(NOOPT=1):
        (item,) = (Tensor(values(dtypes.float32, 64, 0)).realize() < 1).where(2.0, 3.0).schedule()
    src = get_program(item.ast, Device["CPU"].renderer, (Opt("UPCAST", 0, 16),)).src
    assert "__builtin_convertvector(-(gg_signed_charx16)" in src
