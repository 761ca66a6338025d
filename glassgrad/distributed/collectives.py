"""Collectives on Tensors, with torch.distributed's names and in-place semantics.

Each call realizes its tensors into buffers of their own, then runs the collective as one ExecItem: NCCL's on a
CUDA tensor under backend "nccl" (glassgrad/distributed/nccl.py), else the copy through the store
(glassgrad/distributed/copy_backend.py). Inside a TinyJit the item is recorded with the step's kernels and replayed
with them. Every rank must make the same calls in the same order; a rank whose tensor differs is named.
"""

from __future__ import annotations

from glassgrad.distributed import nccl
from glassgrad.distributed.copy_backend import StoreCollective, check_same_call
from glassgrad.distributed.group import ProcessGroup, group
from glassgrad.dtype import dtypes
from glassgrad.engine.lazy import readers_of_buffers
from glassgrad.engine.realize import ExecItem, buffer_of
from glassgrad.engine.threads import captures, one_thread_at_a_time
from glassgrad.runtime.device import Buffer, Device
from glassgrad.tensor import Tensor


class ReduceOp:
    """The reductions (torch.distributed.ReduceOp's names); plain strings work as well."""

    SUM, AVG, PRODUCT, MAX, MIN = "sum", "avg", "product", "max", "min"


def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM) -> None:
    """Reduce `tensor` elementwise over all ranks, in place: afterwards every rank holds the result."""
    _collective("all_reduce", tensor, tensor, op)


def broadcast(tensor: Tensor, src: int = 0) -> None:
    """Copy rank `src`'s `tensor` into every rank's `tensor`."""
    if not 0 <= src < group().world_size:
        raise ValueError(f"broadcast: src={src} is not a rank (0 to {group().world_size - 1})")
    _collective("broadcast", tensor, tensor, ReduceOp.SUM, src)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor) -> None:
    """Fill `output_tensor` with every rank's `input_tensor`, rank after rank along the first axis."""
    _check_sizes("all_gather_into_tensor", output_tensor, input_tensor, "output", "input")
    _collective("all_gather", output_tensor, input_tensor, ReduceOp.SUM)


def all_gather(tensor_list: list[Tensor], tensor: Tensor) -> None:
    """Fill tensor_list[r] with rank r's `tensor`."""
    _check_list("all_gather", tensor_list, tensor)
    gathered = Tensor.empty(len(tensor_list) * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
    all_gather_into_tensor(gathered, tensor)
    for r, t in enumerate(tensor_list):
        t.assign(gathered[r * tensor.numel() : (r + 1) * tensor.numel()].reshape(t.shape)).realize()


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: str = ReduceOp.SUM) -> None:
    """Reduce `input` over all ranks and keep this rank's part of the result, the rank-th of world size equal
    parts along the first axis, in `output`."""
    _check_sizes("reduce_scatter_tensor", input, output, "input", "output")
    _collective("reduce_scatter", output, input, op)


def reduce_scatter(output: Tensor, input_list: list[Tensor], op: str = ReduceOp.SUM) -> None:
    """Reduce input_list[r] over all ranks into rank r's `output`."""
    _check_list("reduce_scatter", input_list, output)
    reduce_scatter_tensor(output, Tensor.cat(*[t.flatten() for t in input_list]), op)


# ---- what every collective does ----


def _check_sizes(what: str, whole: Tensor, part: Tensor, whole_name: str, part_name: str) -> None:
    world = group().world_size
    if whole.numel() != world * part.numel():
        raise RuntimeError(f"{what}: the {whole_name} tensor has {whole.numel()} elements (shape {whole.shape}); it "
                           f"must have world size ({world}) times the {part_name}'s {part.numel()} (shape "
                           f"{part.shape})")  # fmt: skip


def _check_list(what: str, tensors: list[Tensor], tensor: Tensor) -> None:
    world = group().world_size
    if len(tensors) != world:
        raise ValueError(f"{what}: the list has {len(tensors)} tensors; it needs one per rank ({world})")
    for r, t in enumerate(tensors):
        if t.shape != tensor.shape or t.dtype != tensor.dtype or t.device != tensor.device:
            raise ValueError(f"{what}: tensor {r} of the list is {_described(t)} on {t.device}; every one must be "
                             f"{_described(tensor)} on {tensor.device}, as the tensor")  # fmt: skip


def _described(t: Tensor) -> str:
    return f"shape {t.shape} {t.dtype}"


def _checked_op(kind: str, op: str, t: Tensor) -> str:
    """The op as this backend runs it: bool's sum is OR (max) and its product AND (min); avg needs floats."""
    op = str(op).lower()
    if op not in ("sum", "avg", "product", "max", "min"):
        raise ValueError(f"{kind}: unknown op {op!r}; use sum, avg, product, max or min (ReduceOp)")
    if op == "avg" and not dtypes.is_float(t.dtype):
        raise TypeError(f"{kind}: op avg needs a floating-point tensor; this one is {t.dtype}")
    if t.dtype == dtypes.bool:
        return {"sum": "max", "product": "min"}.get(op, op)
    return op


def _own_buffer(t: Tensor) -> Buffer:
    """`t` realized, as a row-major buffer of its own (a view of another tensor becomes a copy)."""
    t.realize()
    if not t._is_contiguous_buffer():
        t._set_uop(t.contiguous().realize().uop)
    return buffer_of(t._current_uop().base)


@one_thread_at_a_time
def _collective(kind: str, out: Tensor, src: Tensor, op: str, root: int = 0) -> None:
    g = group()
    op = _checked_op(kind, op, src) if kind in ("all_reduce", "reduce_scatter") else op
    if out.dtype != src.dtype or out.device != src.device:
        raise TypeError(f"{kind}: the output is {out.dtype} on {out.device} and the input {src.dtype} on "
                        f"{src.device}; they must match")  # fmt: skip
    src_buffer = _own_buffer(src)
    out_buffer = src_buffer if out is src else _own_buffer(out)
    if readers := readers_of_buffers({id(out_buffer)}):  # lazy tensors built on the old values keep them
        Tensor.realize(*readers)
    call = f"{kind} of shape {src.shape} {src.dtype}" + _call_arguments(kind, op, root)
    if g.backend == "nccl" and src.device.split(":")[0] == "CUDA":
        runner = _nccl_runner(g, kind, call, op, root, src)
    else:
        runner = StoreCollective(g, kind, call, op, root)
    item = ExecItem(runner, [out_buffer, src_buffer])
    item.run()
    for captured in captures():  # a TinyJit capturing this step replays the collective with its kernels
        captured.append(item)


def _call_arguments(kind: str, op: str, root: int) -> str:
    return f" op {op}" if kind in ("all_reduce", "reduce_scatter") else f" src {root}" if kind == "broadcast" else ""


def _nccl_runner(g: ProcessGroup, kind: str, call: str, op: str, root: int, src: Tensor) -> nccl.NcclCollective:
    """NCCL's runner for this call, after every rank said it makes the same one (NCCL itself would hang, or write
    past a buffer, where the counts differ)."""
    nccl.nccl_dtype(src.dtype, kind)
    check_same_call(kind, [c.decode() for c in g.exchange(kind, call.encode())], g.rank)
    device = Device.canonicalize(src.device)
    if device not in g.communicators:
        unique_id = g.exchange(f"NCCL's unique id for {device}", nccl.new_unique_id() if g.rank == 0 else b"")[0]
        g.communicators[device] = nccl.Communicator(Device[device], unique_id, g.world_size, g.rank)  # type: ignore[arg-type]
    return nccl.NcclCollective(g.communicators[device], kind, op, root)
