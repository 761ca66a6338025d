"""Shared set-up for the test suite: glassgrad and test/helpers.py importable, and a `device` fixture."""

import pathlib
import sys

import pytest

TEST_DIR = pathlib.Path(__file__).resolve().parent
for path in (TEST_DIR.parent, TEST_DIR):  # the repo root (glassgrad) and this folder (helpers)
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from glassgrad import Device  # noqa: E402
from helpers import DEVICES  # noqa: E402


@pytest.fixture(params=DEVICES)
def device(request):
    """Each test that takes `device` runs once per device, with Device.DEFAULT set to it and restored after."""
    old = Device.DEFAULT
    Device.DEFAULT = request.param
    yield request.param
    Device.DEFAULT = old


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The test runs with Device.DEFAULT = "CPU" whatever the default is (CUDA=1 makes it CUDA): for tests of the
    CPU's own actions, heuristics and threads. A module takes it with `pytestmark = pytest.mark.usefixtures(...)`."""
    monkeypatch.setattr(Device, "DEFAULT", "CPU")
