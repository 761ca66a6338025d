"""DistributedDataParallel: PyTorch's wrapper, so that a training loop stays as it is on one device.

Wrapping broadcasts rank 0's parameters and buffers to every rank. Each parameter gets a post-accumulate-grad hook;
once backward() has filled every parameter's .grad, their gradients are averaged over the ranks in one all_reduce
per dtype and device (the gradients concatenated into one buffer; each .grad becomes a view of it), so every rank's
optimizer takes the same step. Before each forward pass the buffers (BatchNorm's running statistics) are broadcast
from rank 0, as PyTorch's broadcast_buffers=True does. Inside a TinyJit all of this is captured with the step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from glassgrad.distributed.collectives import all_reduce, broadcast
from glassgrad.distributed.group import group
from glassgrad.nn.state import get_state_dict
from glassgrad.tensor import Tensor


def through_one_buffer(tensors: list[Tensor], run: Callable[[Tensor], None]) -> list[Tensor]:
    """`tensors` (one dtype, one device) concatenated into one buffer that `run` changes in place, and split back:
    a view of it for each tensor."""
    # each tensor written into its part by a kernel of its own, where its last ops fuse (a cat would put every
    # tensor's pending work into one kernel: for GPT-2's 148 gradients, a minute of compiling)
    flat = Tensor.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
    parts, start = [], 0
    for t in tensors:  # each part in its tensor's shape: a gradient's product keeps its rows and columns (written
        parts.append(flat[start : start + t.numel()].reshape(t.shape))  # flat, it is no matmul: 2 ms, not 0.2)
        start += t.numel()
    for part, t in zip(parts, tensors):
        part.assign(t)
    run(flat)
    return parts


def by_dtype_and_device(tensors: list[Tensor]) -> list[list[Tensor]]:
    """The tensors grouped so that each group can share one buffer."""
    groups: dict[tuple, list[Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    return list(groups.values())


class _GradientSync:
    """The module's parameters and buffers, which parameters have their gradient from this backward, and the
    all_reduce once all have (no __dict__: get_state_dict, and so get_parameters, do not walk into it)."""

    __slots__ = ("names", "params", "buffers", "ready", "syncing")

    def __init__(self, named: dict[str, Tensor], buffers: list[Tensor]):
        self.names = {id(t): name for name, t in named.items()}
        self.params, self.buffers = list(named.values()), buffers
        self.ready: set[int] = set()
        self.syncing = True

    def hook(self, param: Tensor) -> None:
        if not self.syncing:  # no_sync(): gradients accumulate locally, averaged by the first backward after
            return
        self.ready.add(id(param))
        if len(self.ready) == len(self.params):
            self.ready.clear()
            self.average()

    def average(self) -> None:
        if group().world_size == 1:
            return
        for params in by_dtype_and_device(self.params):
            averaged = through_one_buffer([p.grad for p in params], lambda flat: all_reduce(flat, "avg"))  # type: ignore[misc]
            for p, g in zip(params, averaged):
                p.grad = g

    def check_finished(self) -> None:
        """Raise where the last backward gave some parameters a gradient and not others (PyTorch's error)."""
        if self.ready:
            missing = [self.names[id(p)] for p in self.params if id(p) not in self.ready]
            self.ready.clear()
            raise RuntimeError("DistributedDataParallel: expected to have finished the gradient reduction of the "
                               "last backward before a new forward, but these parameters got no gradient: "
                               f"{', '.join(missing)}; every parameter the module holds must be used to compute "
                               "the loss (give an unused one requires_grad=False before wrapping)")  # fmt: skip


class DistributedDataParallel:
    """Wraps `module` (anything callable whose attributes hold its tensors) for data-parallel training: call it as
    the module; its gradients are averaged over the ranks after each backward()."""

    def __init__(self, module: Any, broadcast_buffers: bool = True):
        group()  # the group must exist
        self.module = module
        unique: dict[int, tuple[str, Tensor]] = {}
        for name, t in get_state_dict(module).items():  # a tensor held twice is one, by its first name
            unique.setdefault(id(t), (name, t))
        params = {n: t for n, t in unique.values() if t.requires_grad is not False}
        buffers = [t for _, t in unique.values() if t.requires_grad is False]
        self._sync = _GradientSync(params, buffers if broadcast_buffers else [])
        _broadcast_in_place([*params.values(), *buffers])
        for p in params.values():
            p.register_post_accumulate_grad_hook(self._sync.hook)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._sync.check_finished()
        if self._sync.buffers:
            _broadcast_in_place(self._sync.buffers)
        return self.module(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The module's forward pass (as calling this)."""
        return self(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients without averaging them; the first one after averages the
        sum (PyTorch's gradient accumulation)."""
        self._sync.syncing = False
        try:
            yield
        finally:
            self._sync.syncing = True


def _broadcast_in_place(tensors: list[Tensor]) -> None:
    """Every rank's `tensors` become rank 0's (each keeps its buffer: an optimizer holding it sees the values)."""
    if group().world_size == 1:
        return
    for same in by_dtype_and_device(tensors):
        for t, value in zip(same, through_one_buffer(same, lambda flat: broadcast(flat, 0))):
            t.assign(value)
    Tensor.realize(*tensors)
