"""What building a graph may ask about a device, by name, without importing the runtime: the device's canonical name,
the default device, whether it runs blocks of threads (a GPU), whether it holds a dtype, whether it exists.

The Tensor API's methods (mixin/) build graphs and sit below the runtime, so they ask here. The runtime answers:
runtime/device.py hands this module its device registry (`answer_with`) when it is imported, which tensor.py does,
so a Tensor op always finds the answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from glassgrad.dtype import DType
    from glassgrad.renderer import Renderer


class DeviceRegistry(Protocol):
    """What this module needs of the runtime's registry (runtime/device.py `Device`)."""

    @property
    def DEFAULT(self) -> str: ...

    def __getitem__(self, name: str) -> Any: ...  # an opened device: its `renderer` (a Renderer) and `supports(dtype)`


_registry: DeviceRegistry | None = None


def answer_with(registry: DeviceRegistry) -> None:
    """The runtime's registry answers the questions from now on (runtime/device.py calls this once)."""
    global _registry
    _registry = registry


def _devices() -> DeviceRegistry:
    if _registry is None:
        raise RuntimeError("no device runtime: import glassgrad (its Tensor imports the runtime) before asking")
    return _registry


def canonical(name: str | tuple[str, ...] | list[str]) -> Any:
    """'cpu' -> 'CPU', 'cuda:0' -> 'CUDA' (device 0 has no suffix), 'CUDA:1' stays; a tuple (or list) of names, the
    devices a sharded tensor lives on, becomes a tuple of canonical names."""
    if isinstance(name, (tuple, list)):
        return tuple(canonical(n) for n in name)
    base, _, index = name.partition(":")
    base = base.upper()
    return base if index in ("", "0") else f"{base}:{index}"


def default_device() -> str:
    """Where a new tensor goes when no device is named (`Device.DEFAULT`)."""
    return _devices().DEFAULT


def device_or_default(device: str | None) -> str:
    """The canonical name of `device`, or the default device where none is named."""
    return canonical(device) if device else default_device()


def check_known(device: str) -> None:
    """A ValueError naming the devices glassgrad has, unless `device` is one of them (it is opened to find out)."""
    _devices()[device]


def renderer(device: str) -> Renderer:
    """The renderer of the device's kernels: what its kernels can do and pay for (the scheduler's rules ask it)."""
    return _devices()[device].renderer


def runs_blocks(device: str) -> bool:
    """Whether the device runs blocks of threads that share memory (a GPU): its renderer's `has_local`."""
    return renderer(device).has_local


def fuses_attention(device: str, dtype: DType, head_size: int, value_size: int) -> bool:
    """Whether the device's renderer writes a whole fused attention kernel (an ATTENTION node) for q, k, v of `dtype`
    and these head sizes: its `fuses_attention`."""
    return renderer(device).fuses_attention(dtype, head_size, value_size)


def holds(device: str, dtype: DType) -> bool:
    """Whether the device can hold (and compute with) `dtype`."""
    return _devices()[device].supports(dtype)
