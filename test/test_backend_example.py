"""The device of examples/backend_in_one_file.py (NUMPY) passes the suite's Tensor API tests for the ops it claims.

These are not copies: every test of CLAIMED that runs per device (it takes the `device` fixture) is imported from
its module and collected here a second time, where the `device` fixture below gives NUMPY instead of CPU and PYTHON.
NumPy has no bfloat16, so the device refuses it: a test case about bfloat16 must stop with that error instead.
Matmul, whose API tests run on fixed devices, is checked with the same shapes and checker as test/api/test_linalg.py.
"""

import functools
import inspect
import pathlib
import sys

import pytest
import torch

from glassgrad import Device, dtypes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import backend_in_one_file  # noqa: E402,F401  (registers the NUMPY device)

import test_elementwise  # noqa: E402
import test_kernel_counts  # noqa: E402
import test_movement  # noqa: E402
import test_reduce  # noqa: E402
from api.test_linalg import MATMUL_SHAPES  # noqa: E402
from torch_check import check_op  # noqa: E402

DEVICE = "NUMPY"
CLAIMED = (test_elementwise, test_reduce, test_movement, test_kernel_counts)  # the ops, and fusion


def _runs_per_device(fn) -> bool:
    """A test that takes the `device` fixture (not one that parametrizes `device` itself)."""
    marks = getattr(fn, "pytestmark", [])
    parametrized = {name.strip() for m in marks if m.name == "parametrize" for name in str(m.args[0]).split(",")}
    return "device" in inspect.signature(fn).parameters and "device" not in parametrized


def _without_bfloat16(test):
    """The test as it is, except that a case about bfloat16 must fail with the device's "cannot hold" error."""

    @functools.wraps(test)  # keeps the signature (fixtures) and the parametrize marks
    def run(*args, **kwargs):
        if "bfloat16" in test.__name__ or any(v is dtypes.bfloat16 for v in kwargs.values()):
            with pytest.raises(TypeError, match=f"device {DEVICE} cannot hold dtypes.bfloat16"):
                test(*args, **kwargs)
        else:
            test(*args, **kwargs)

    return run


for _module in CLAIMED:
    for _name, _fn in vars(_module).items():
        if _name.startswith("test_") and _runs_per_device(_fn):
            globals()[f"{_name}__{_module.__name__}"] = _without_bfloat16(_fn)


@pytest.fixture(autouse=True)
def device():
    """Every test here runs on the example's device, as the default device too."""
    old = Device.DEFAULT
    Device.DEFAULT = DEVICE
    yield DEVICE
    Device.DEFAULT = old


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_and_its_gradients_match_torch(shapes):
    check_op(shapes, torch.matmul, lambda x, w: x @ w, device=DEVICE)


def test_the_device_is_registered_and_refuses_bfloat16():
    assert Device[DEVICE.lower()] is Device[DEVICE] and Device[DEVICE].renderer.device == DEVICE
    with pytest.raises(ValueError, match=r"unknown device 'NOPE'; glassgrad has: .*NUMPY"):
        Device["nope"]
    assert not Device[DEVICE].supports(dtypes.bfloat16) and Device[DEVICE].supports(dtypes.float16)
