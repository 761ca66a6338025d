"""One way to compare glassgrad with NumPy: random inputs of given shapes and layouts, run through both."""

from __future__ import annotations

import ctypes
import importlib
import os
import shutil
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from glassgrad import Tensor, dtypes
from glassgrad.dtype import DType
from glassgrad.helpers import getenv


def _cuda_missing() -> str | None:
    """Why CUDA cannot be used here (the driver's or the loader's words), or None where it can."""
    from glassgrad import Device
    from glassgrad.runtime.ops_cuda import CUDAUnavailable

    try:
        Device["CUDA"]
    except CUDAUnavailable as e:
        return str(e)
    return None


CUDA_MISSING = _cuda_missing()
needs_gpu = pytest.mark.skipif(CUDA_MISSING is not None, reason=f"needs a GPU: {CUDA_MISSING}")


def _nvrtc_missing() -> str | None:
    """Why NVRTC cannot be loaded here, or None where it can (compiling CUDA C needs no GPU)."""
    from glassgrad.runtime.ops_cuda import CUDAUnavailable, libnvrtc

    try:
        libnvrtc()
    except CUDAUnavailable as e:
        return str(e)
    return None


needs_nvrtc = pytest.mark.skipif(_nvrtc_missing() is not None, reason="needs NVRTC (pip install nvidia-cuda-nvrtc)")


def nvrtc_log(src: str, arch: str) -> str:
    """NVRTC's log of compiling CUDA source for `arch`, with ptxas's report (registers, spills); fails on an error."""
    from glassgrad.runtime import ops_cuda

    compiler = ops_cuda.NVRTCCompiler(arch)
    options = compiler.options_for(src) + ["--ptxas-options=-v"]
    lib, program = ops_cuda.libnvrtc(), ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), b"kernel.cu", 0, None, None)
    try:
        status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(
            *(o.encode() for o in options)))  # fmt: skip
        assert status == 0, compiler._log(program)
        return compiler._log(program)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def ptxas_report(src: str, arch: str) -> str:
    """nvrtc_log, where it holds ptxas's report; the test skips where this NVRTC keeps the report to itself (the
    H200 machine's, under the same options: its log holds the warnings alone)."""
    log = nvrtc_log(src, arch)
    if "ptxas info" not in log:
        pytest.skip(f"this NVRTC does not report ptxas's register use (its log: {log.strip()[:200]})")
    return log


# the devices the API tests run on; CUDA=1 adds the GPU (and makes it the default device)
DEVICES = ("CPU", "PYTHON") + (("CUDA",) if getenv("CUDA", 0) else ())


def missing(message: str) -> None:
    """A test's tool or package is absent: in CI (CI=true, where .ci/run installs everything) the test fails;
    elsewhere (e.g. the GPU machine, which has no browser) it skips, saying what to install."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(message)
    pytest.skip(message, allow_module_level=True)


def require_program(*names: str, install: str) -> str:
    """The path of the first of `names` on PATH; see `missing` for what happens without it."""
    found = next((path for name in names if (path := shutil.which(name))), None)
    if found is None:
        missing(f"this test needs {names[0]}: {install}")
    return found


def require_module(name: str, install: str):
    """The module `name`, imported; see `missing` for what happens without it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(f"this test needs the Python package {name}: {install}")


# The ways an input can be laid out in memory; every one but "contiguous" reads through a non-trivial view.
LAYOUTS = ("contiguous", "transposed", "strided", "flipped", "expanded")

NUMPY_DTYPES = {
    dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
    dtypes.uint16: np.uint16, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64,
    dtypes.uint64: np.uint64, dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64,
}  # fmt: skip


def glassgrad_dtype(np_dtype) -> DType:
    """The glassgrad dtype of a NumPy dtype."""
    for ours, theirs in NUMPY_DTYPES.items():
        if np.dtype(theirs) == np.dtype(np_dtype):
            return ours
    raise TypeError(f"no glassgrad dtype for NumPy's {np_dtype}")


def random_array(shape: tuple[int, ...], dtype: DType = dtypes.float32, low: float = -3, high: float = 3,
                 seed: int = 0) -> np.ndarray:  # fmt: skip
    """Reproducible random values of `shape`: uniform in [low, high), whole numbers for integer dtypes."""
    rng = np.random.default_rng(seed)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtypes.is_int(dtype):
        return rng.integers(low, high, shape, endpoint=False).astype(NUMPY_DTYPES[dtype])
    return rng.uniform(low, high, shape).astype(NUMPY_DTYPES[dtype])


def make_input(shape: tuple[int, ...], device: str, dtype: DType = dtypes.float32, layout: str = "contiguous",
               low: float = -3, high: float = 3, seed: int = 0) -> tuple[np.ndarray, Tensor]:  # fmt: skip
    """The same values of `shape` as a NumPy array and as a glassgrad Tensor, read through a view for `layout`."""
    shape = tuple(shape)
    if layout == "contiguous":
        stored, view = shape, lambda x: x
    elif layout == "transposed":  # stored with the axes reversed, read through .T
        stored, view = shape[::-1], lambda x: x.T
    elif layout == "strided":  # every other element of a buffer twice as long in each dimension
        stored, view = tuple(2 * s for s in shape), lambda x: x[tuple(slice(None, None, 2) for _ in shape)]
    elif layout == "flipped":  # every axis reversed
        stored, view = shape, lambda x: x[tuple(slice(None, None, -1) for _ in shape)]
    elif layout == "expanded":  # the first axis broadcast from size 1
        stored = (1,) + shape[1:] if shape else ()
        view = lambda x: x if not shape else (x.expand(shape) if isinstance(x, Tensor) else np.broadcast_to(x, shape))  # noqa: E731
    else:
        raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")
    array = random_array(stored, dtype, low, high, seed)
    # realized flat and reshaped lazily: the input is a buffer seen through a view, and realizing it runs no kernel
    tensor = Tensor(array.reshape(-1), device=device).realize().reshape(stored)
    return view(array), view(tensor)


def assert_matches(ours: Tensor, expected: np.ndarray, dtype: DType | None = None, rtol: float = 1e-5,
                   atol: float = 1e-6) -> None:  # fmt: skip
    """Same shape, the dtype `dtype` (NumPy's result dtype if None) and the same values (exact for ints and bools)."""
    expected = np.asarray(expected)
    dtype = dtype if dtype is not None else glassgrad_dtype(expected.dtype)
    assert ours.shape == expected.shape, f"shape {ours.shape} != NumPy's {expected.shape}"
    assert ours.dtype == dtype, f"dtype {ours.dtype} != {dtype}"
    got = ours.numpy()
    if dtypes.is_float(dtype):
        np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))


def check(shapes: Sequence[tuple[int, ...]], ours: Callable[..., Tensor], numpy_fn: Callable[..., np.ndarray],
          device: str, dtype: DType = dtypes.float32, layout: str = "contiguous", low: float = -3, high: float = 3,
          expected_dtype: DType | None = None, rtol: float = 1e-5, atol: float = 1e-6) -> Tensor:  # fmt: skip
    """Run `ours` on glassgrad tensors and `numpy_fn` on NumPy arrays of the same random values; compare them.

    One input per shape, each of `dtype` and read through `layout`. The result must have NumPy's shape and values,
    and `expected_dtype` (NumPy's result dtype when None: pass it where PyTorch's promotion differs from NumPy's).
    """
    pairs = [make_input(s, device, dtype, layout, low, high, seed=i) for i, s in enumerate(shapes)]
    arrays, tensors = [a for a, _ in pairs], [t for _, t in pairs]
    result = ours(*tensors)
    with np.errstate(all="ignore"):
        expected = numpy_fn(*arrays)
    assert_matches(result, expected, expected_dtype, rtol, atol)
    return result


def count_calls(monkeypatch: pytest.MonkeyPatch, counts: dict[str, int], key: str, owner: object, name: str) -> None:
    """Count the calls of owner.name (a function of a module, a method of an object) in counts[key], for one test."""
    original = getattr(owner, name)
    counts.setdefault(key, 0)

    def counted(*args, **kwargs):
        counts[key] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def split_every_cpu_kernel(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """The CPU device splits every kernel over `threads` threads, however small (results must not depend on it)."""
    import glassgrad.runtime.ops_cpu as ops_cpu

    monkeypatch.setattr(ops_cpu, "THREADS", threads)
    monkeypatch.setattr(ops_cpu, "THREADING_THRESHOLD_S", -1.0)


def gpu_opts(ast) -> list:
    """The heuristics' choice for a kernel as on a GPU (CUDA's vector lanes, blocks of threads), on any machine."""
    from glassgrad.codegen.heuristics import hand_coded_opts
    from glassgrad.renderer.cuda import CUDARenderer

    return hand_coded_opts(ast, CUDARenderer.vector_lanes, has_local=True)


def peak_memory_growth_mb(code: str, setup: str = "") -> float:
    """How far the peak resident memory of a fresh Python process grows while it runs `code` (after `setup`, which
    imports glassgrad). The peak is /proc/self/status's VmHWM: resource.getrusage's ru_maxrss survives exec, so a
    child started by a large test process would start at its parent's peak. `code` may raise: a refusal is the point."""
    import subprocess
    import sys
    import textwrap

    script = f"""
from glassgrad import Tensor
{textwrap.dedent(setup)}
def peak_mb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
Tensor([1.0]).realize()  # the first kernel's compiler and libraries count as the baseline
before = peak_mb()
try:
{textwrap.indent(textwrap.dedent(code), "    ")}
except Exception as e:
    print(type(e).__name__, e)
print(peak_mb() - before)
"""
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "CPU": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip().splitlines()[-1])


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, causal: bool,
                        scale: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """scaled_dot_product_attention's outputs and each row's logsumexp of the scores, in float64; a row whose keys
    are all masked gives 0 and -inf (glassgrad's rule; PyTorch gives nan)."""
    scores = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * scale
    length, source = scores.shape[-2:]
    if causal:  # key j <= row i
        scores = np.where(np.arange(source)[None, :] <= np.arange(length)[:, None], scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    top = scores.max(-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isinf(top), 0, top))
    total = weights.sum(-1, keepdims=True)
    out = np.divide(weights @ v, total, out=np.zeros(scores.shape[:-1] + v.shape[-1:]), where=total > 0)
    with np.errstate(divide="ignore"):
        return out, np.log(total[..., 0]) + top[..., 0]
