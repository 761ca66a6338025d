"""glassgrad/device_info.py: what building a graph asks of a device, answered by the runtime's registry."""

import pytest

from glassgrad import Device, Tensor, device_info, dtypes
from glassgrad.runtime.ops_cpu import CpuDevice
from glassgrad.uop.ops import Ops


@pytest.mark.parametrize(
    "name, expected",
    [("cpu", "CPU"), ("CUDA:0", "CUDA"), ("cuda:1", "CUDA:1"), (["cpu", "CPU:1"], ("CPU", "CPU:1")), (("x",), ("X",))],
)
def test_canonical_names(name, expected):
    assert device_info.canonical(name) == expected == Device.canonicalize(name)


def test_the_answers_are_the_runtimes(device):
    assert device_info.default_device() == Device.DEFAULT == device_info.device_or_default(None) == device
    assert device_info.device_or_default(device.lower()) == device
    assert device_info.runs_blocks(device) is Device[device].renderer.has_local
    for dtype in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int64):
        assert device_info.holds(device, dtype) is Device[device].supports(dtype)


def test_an_unknown_device_is_named():
    with pytest.raises(ValueError, match=r"unknown device 'NOPE'; glassgrad has: .*CPU"):
        device_info.check_known("NOPE")


@pytest.fixture
def blocks_device(monkeypatch):
    """A device registered for the test: the CPU's pieces, with a renderer that says it runs blocks of threads."""

    def open_blocks(name):
        opened = CpuDevice(name)
        opened.renderer.has_local = True
        return opened

    monkeypatch.setattr(Device, "_registered", {**Device._registered})
    monkeypatch.setattr(Device, "_opened", {**Device._opened})
    Device.register("BLOCKS", open_blocks)
    return "BLOCKS"


def test_a_mixin_asks_the_device_it_builds_for(blocks_device):
    """split_reduce (mixin/) sums a long reduction into few outputs in two kernels only on a device that runs blocks:
    it learns which through device_info, from the registered device's renderer."""
    assert device_info.runs_blocks(blocks_device) and not device_info.runs_blocks("CPU")

    def stages(device):
        total = Tensor.empty(1 << 17, device=device).sum()
        return sum(node.op is Ops.REDUCE_AXIS for node in total.uop.toposort())

    assert (stages("CPU"), stages(blocks_device)) == (1, 2)
