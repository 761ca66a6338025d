"""The scatter-add (SCATTER_ADD, mixin/scatter_add.py): the gradient of every lookup by index (nn.Embedding, gather,
advanced indexing), scatter_reduce's sum and mean, and index_add, beside PyTorch; its schedule and kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassgrad import Tensor, dtypes, nn
from glassgrad.codegen import get_program, kernel_name
from glassgrad.codegen.lowerer import lower_kernel
from glassgrad.renderer.cstyle import CRenderer
from glassgrad.renderer.cuda import CUDARenderer
from glassgrad.uop.ops import Ops
from helpers import needs_gpu, needs_nvrtc, nvrtc_log
from test_device_checks import raises_like, torch_error

TORCH_DTYPES = {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}
TOLERANCE = {dtypes.float32: 1e-6, dtypes.float16: 1e-2, dtypes.bfloat16: 2e-2}


def _values(shape: tuple[int, ...], seed: int, dtype=dtypes.float32) -> np.ndarray:
    """Random float32 values that the dtype holds exactly (rounded through it), so both sides start alike."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return torch.tensor(x).to(TORCH_DTYPES[dtype]).float().numpy()


def _close(ours: Tensor, want: torch.Tensor, dtype=dtypes.float32) -> None:
    """ours equals PyTorch's float32 result rounded to dtype (ours adds in float32 and rounds once)."""
    want = want.detach().to(TORCH_DTYPES[dtype]).float().numpy()
    got = ours.float().numpy() if dtypes.is_float(ours.dtype) else ours.numpy()
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


# ---- nn.Embedding ----

EMBEDDINGS = [(1, 3, [[0, 0, 0]]), (7, 4, [[1, 6, 1], [0, 1, 6]]), (50257, 2, [50256, 0, 50256, 17, 50256])]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("vocab,dim,ids", EMBEDDINGS, ids=["vocab 1", "vocab 7", "vocab 50257"])
def test_embedding_gradient_adds_each_ids_rows_like_torch(device, vocab, dim, ids, dtype):
    if device == "PYTHON" and vocab > 1000 and dtype != dtypes.float32:
        pytest.skip("the PYTHON interpreter takes seconds over 50257 rows; float32 covers it there")
    weight, ids = _values((vocab, dim), 0, dtype), np.array(ids)
    g = _values(ids.shape + (dim,), 1, dtype)
    table = torch.tensor(weight, requires_grad=True)
    out = torch.nn.functional.embedding(torch.tensor(ids), table)
    (out * torch.tensor(g)).sum().backward()
    layer = nn.Embedding(vocab, dim)
    layer.weight = Tensor(weight, dtype=dtype, requires_grad=True)
    ours = layer(Tensor(ids))
    (ours * Tensor(g, dtype=dtype)).sum().backward()
    _close(ours, out, dtype)
    _close(layer.weight.grad, table.grad, dtype)


def test_embedding_gradient_of_no_ids_is_zeros(device):
    layer = nn.Embedding(5, 3)
    layer.weight.requires_grad = True
    out = layer(Tensor.zeros(2, 0, dtype=dtypes.int32))
    assert out.shape == (2, 0, 3)
    out.sum().backward()
    assert layer.weight.grad.tolist() == [[0.0] * 3] * 5


def test_embedding_gradient_schedule_is_a_zero_fill_and_a_scatter(on_the_cpu):
    """The gradient no longer sums over every token for each vocabulary row: a kernel fills zeros, one kernel runs
    over the tokens x width values and adds each into its row, and no kernel has a reduction."""
    layer = nn.Embedding(50257, 64)
    layer.weight.requires_grad = True
    ids, g = Tensor.randint(1024, low=0, high=50257).realize(), Tensor.randn(1024, 64).realize()
    (layer(ids) * g).sum().backward()
    kernels = [item.ast for item in layer.weight.grad.schedule()]
    assert len(kernels) == 2
    assert not any(n.op is Ops.REDUCE_AXIS for ast in kernels for n in ast.toposort())
    assert kernel_name(kernels[0]).startswith("E_") and kernel_name(kernels[1]) == "S_1024_64"


# ---- gather and advanced indexing ----


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_gradient_adds_repeated_places_like_torch(device, dim):
    x, index = _values((4, 5), 2), np.random.default_rng(3).integers(0, 4, (3, 4)) % np.array([4, 5, 5])[dim]
    g = _values(index.shape, 4)
    tx = torch.tensor(x, requires_grad=True)
    (tx.gather(dim, torch.tensor(index)) * torch.tensor(g)).sum().backward()
    gx = Tensor(x, requires_grad=True)
    (gx.gather(dim, Tensor(index)) * Tensor(g)).sum().backward()
    _close(gx.grad, tx.grad)


@pytest.mark.parametrize("index", [
    lambda i: (i([[3, 0], [3, 3]]), slice(None), i([2, -1])),  # two index tensors apart: their dims go first
    lambda i: (slice(None), i([5, 0, 5, -1])),  # a repeated place, and one counted from the end
    lambda i: (i([1, 1]), i([[0], [2]])),  # broadcast together
    lambda i: (i([]),),  # selects nothing
], ids=["apart", "repeated", "broadcast", "empty"])  # fmt: skip
def test_advanced_index_gradient_adds_repeated_places_like_torch(device, index):
    x = _values((4, 6, 3), 5)
    tx = torch.tensor(x, requires_grad=True)
    want = tx[index(lambda v: torch.tensor(v, dtype=torch.int64))]
    (want * 2).sum().backward()
    gx = Tensor(x, requires_grad=True)
    got = gx[index(lambda v: Tensor(v, dtype=dtypes.int32))]
    (got * 2).sum().backward()
    _close(got, want)
    _close(gx.grad, tx.grad)


# ---- scatter_reduce and index_add ----


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16], ids=str)
def test_scatter_reduce_sum_and_mean_like_torch(device, reduce, include_self, dtype):
    x, src = _values((4, 5), 6, dtype), _values((3, 4), 7, dtype)
    index = np.random.default_rng(8).integers(0, 5, (3, 4))  # fewer rows than x: its last row gets nothing
    g = _values((4, 5), 9, dtype)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    want = tx.scatter_reduce(1, torch.tensor(index), ts, reduce, include_self=include_self)
    (want * torch.tensor(g)).sum().backward()
    gx, gs = Tensor(x, dtype=dtype, requires_grad=True), Tensor(src, dtype=dtype, requires_grad=True)
    got = gx.scatter_reduce(1, Tensor(index), gs, reduce, include_self=include_self)
    (got * Tensor(g, dtype=dtype)).sum().backward()
    _close(got, want, dtype)
    _close(gx.grad, tx.grad, dtype)
    _close(gs.grad, ts.grad, dtype)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint8], ids=str)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_scatter_reduce_of_ints_wraps_and_rounds_down_like_torch(device, dtype, reduce):
    torch_dtype = {dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.int8: torch.int8,
                   dtypes.uint8: torch.uint8}[dtype]  # fmt: skip
    x, src = np.array([[100, 7, 3, 0]]), np.array([[120, 120, 5, 9, 2]])  # 340 wraps around in 8 bits
    index = np.array([[0, 0, 2, 2, 2]])
    tx, tsrc = torch.tensor(x, dtype=torch_dtype), torch.tensor(src, dtype=torch_dtype)
    want = tx.scatter_reduce(1, torch.tensor(index), tsrc, reduce)
    got = Tensor(x, dtype=dtype).scatter_reduce(1, Tensor(index), Tensor(src, dtype=dtype), reduce)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("dim,shape", [(0, (5, 3)), (1, (2, 6)), (-1, (4,))])
@pytest.mark.parametrize("alpha", [1, 2.5])
def test_index_add_like_torch(device, dim, shape, alpha):
    x = _values(shape, 10)
    length = 4
    index = np.random.default_rng(11).integers(0, shape[dim], length)
    index[1] = index[0]  # a repeated place
    source = _values(shape[: dim % len(shape)] + (length,) + shape[dim % len(shape) + 1 :], 12)
    g = _values(shape, 13)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(source, requires_grad=True)
    want = tx.index_add(dim, torch.tensor(index), ts, alpha=alpha)
    (want * torch.tensor(g)).sum().backward()
    gx, gs = Tensor(x, requires_grad=True), Tensor(source, requires_grad=True)
    got = gx.index_add(dim, Tensor(index), gs, alpha=alpha)
    (got * Tensor(g)).sum().backward()
    _close(got, want)
    _close(gx.grad, tx.grad)
    _close(gs.grad, ts.grad)


def test_index_add_in_place_writes_the_tensor_like_torch(device):
    want = torch.arange(12.0).reshape(3, 4).index_add_(0, torch.tensor([2, 2, 0]), torch.ones(3, 4))
    x = Tensor.arange(12.0).reshape(3, 4).contiguous().realize()
    x.index_add_(0, Tensor([2, 2, 0]), Tensor.ones(3, 4))
    assert x.tolist() == want.tolist()


def test_index_add_in_place_refuses_a_tensor_autograd_tracks_like_torch():
    error = torch_error(lambda: torch.zeros(3, requires_grad=True).index_add_(0, torch.tensor([0]), torch.ones(1)))
    with pytest.raises(type(error), match="index_add_: this tensor or source requires grad"):
        Tensor.zeros(3, requires_grad=True).index_add_(0, Tensor([0]), Tensor.ones(1))
    x = Tensor.zeros(3, requires_grad=True)
    with Tensor.no_grad():
        x.index_add_(0, Tensor([0, 0]), Tensor.ones(2))
    assert x.tolist() == [2.0, 0.0, 0.0]


@pytest.mark.parametrize("where", ["index", "source"])
def test_a_scatter_from_another_device_is_refused(where):
    """Its kernel would read the other device's buffer as its own (a CPU kernel given a PYTHON bytearray crashed)."""
    index, source = Tensor([0], device="PYTHON" if where == "index" else "CPU"), Tensor.ones(1, device="CPU")
    source = source.to("PYTHON") if where == "source" else source
    with pytest.raises(ValueError, match=f"index_add: {'src' if where == 'source' else where} is on PYTHON but the "
                                         "tensor is on CPU"):  # fmt: skip
        Tensor.zeros(3, device="CPU").index_add(0, index, source)
    with pytest.raises(ValueError, match="scatter_reduce: .* is on PYTHON but the tensor is on CPU"):
        Tensor.zeros(3, device="CPU").scatter_reduce(0, index, source, "sum")


def test_index_add_of_no_index_is_the_tensor(device):
    x = Tensor([[1.0, 2.0]])
    assert x.index_add(0, Tensor([], dtype=dtypes.int32), Tensor.zeros(0, 2)).tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("call,message", [
    (lambda t, zeros, x: x.index_add(0, t([0, 1]), zeros(2, 3)), r"index_add: source has shape \(2, 3\) but must be "),
    (lambda t, zeros, x: x.index_add(0, t([0.0]), zeros(1, 2)), r"index_add: index must be an integer tensor, got "),
    (lambda t, zeros, x: x.index_add(0, t([[0]]), zeros(1, 2)), r"index_add: index must be a vector \(0-d or 1-d\)"),
    (lambda t, zeros, x: x.index_add(0, t([0]), zeros(1, 2).int()), r"index_add: source has dtype .*int but the "),
], ids=["shape", "float index", "2-d index", "dtype"])  # fmt: skip
def test_index_add_checks_its_arguments_with_torchs_classes(call, message):
    error = torch_error(lambda: call(torch.tensor, torch.zeros, torch.zeros(3, 2)))
    with pytest.raises(type(error), match=message):
        call(Tensor, Tensor.zeros, Tensor.zeros(3, 2))


# ---- indices outside the dimension ----


@pytest.mark.parametrize("bad", [7, -1])
def test_indices_outside_raise_naming_the_op(device, bad):
    """Each scatter's kernel checks its index (and writes nowhere for a bad one): the gradient alone raises too."""

    def embedding_gradient():
        layer = nn.Embedding(3, 2)
        layer.weight.requires_grad = True
        layer(Tensor([0, bad])).sum().backward()
        layer.weight.grad.tolist()

    raises_like(lambda: torch.nn.functional.embedding(torch.tensor([0, bad]), torch.zeros(3, 2)), embedding_gradient,
                rf"Embedding: index {bad} is outside the table's rows 0..2")  # fmt: skip
    raises_like(lambda: torch.zeros(3).index_add(0, torch.tensor([bad]), torch.ones(1)),
                lambda: Tensor.zeros(3).index_add(0, Tensor([bad]), Tensor.ones(1)).tolist(),
                rf"index_add: index {bad} is out of bounds for dimension 0 with size 3")  # fmt: skip
    raises_like(lambda: torch.zeros(3).scatter_reduce(0, torch.tensor([bad]), torch.ones(1), "sum"),
                lambda: Tensor.zeros(3).scatter_reduce(0, Tensor([bad]), Tensor.ones(1), "sum").tolist(),
                rf"scatter_reduce: index {bad} is out of bounds for dimension 0 with size 3")  # fmt: skip


def test_an_index_is_tested_in_its_own_dtype(device):
    """An int64 index past 2**32 raises and writes nowhere (cast to 32 bits it would name row 1); an int8 index is
    tested below 0 only where the rows are more than it can reach, and a uint8 one not at all there."""
    raises_like(lambda: torch.zeros(3).index_add(0, torch.tensor([2**32 + 1]), torch.ones(1)),
                lambda: Tensor.zeros(3).index_add(0, Tensor([2**32 + 1], dtype=dtypes.int64), Tensor.ones(1)).tolist(),
                r"index_add: index 4294967297 is out of bounds for dimension 0 with size 3")  # fmt: skip
    raises_like(lambda: torch.zeros(300).index_add(0, torch.tensor([-1], dtype=torch.int8), torch.ones(1)),
                lambda: Tensor.zeros(300).index_add(0, Tensor([-1], dtype=dtypes.int8), Tensor.ones(1)).tolist(),
                r"index_add: index -1 is out of bounds for dimension 0 with size 300")  # fmt: skip
    added = Tensor.zeros(300).index_add(0, Tensor([255, 0, 255], dtype=dtypes.uint8), Tensor([1.0, 2.0, 3.0]))
    assert added.tolist() == [2.0] + [0.0] * 254 + [4.0] + [0.0] * 44


# ---- kernels ----


def _scatter_ast(dtype=dtypes.float32, rows: int = 50, width: int = 64):
    values = Tensor.empty(16, width, dtype=dtype, device="CPU")
    ids = Tensor.empty(16, dtype=dtypes.int32, device="CPU")
    out = Tensor.zeros(rows, width, dtype=dtype, device="CPU").index_add(0, ids, values)
    return next(item.ast for item in out.schedule() if kernel_name(item.ast).startswith("S_"))


def test_cpu_threads_never_split_the_scatters_axis():
    """On the CPU the loop over the colliding axis (the 16 ids) is innermost and no output loop: threads split the
    width's loop only (its 4 vectors of 16 lanes), so no two threads add into one place."""
    spec = get_program(_scatter_ast(), CRenderer())
    assert spec.global_size == (4,) and "ridx1 < 16" in spec.src
    lowered = lower_kernel(_scatter_ast())
    assert lowered.arg == 1  # one output loop; the scatter's own follows it


@pytest.mark.parametrize("where", ["CPU", pytest.param("CUDA", marks=needs_gpu)])
def test_threads_adding_into_one_place_all_count(where):
    """A million ones added into two places, on as many CPU threads or GPU threads as there are: none is lost."""
    ones = Tensor.ones(1 << 20, 2, device=where).contiguous().realize()
    ids = Tensor.zeros(1 << 20, dtype=dtypes.int32, device=where).contiguous().realize()
    added = Tensor.zeros(3, 2, device=where).index_add(0, ids, ones)
    assert added.tolist() == [[2.0**20] * 2, [0.0] * 2, [0.0] * 2]


def test_cuda_adds_atomically_in_the_types_atomicadd_takes():
    sources = {d: get_program(_scatter_ast(d), CUDARenderer()).src for d in (dtypes.float32, dtypes.int64)}
    assert "atomicAdd(&*(data0+" in sources[dtypes.float32]
    assert "atomicAdd((unsigned long long*)&*(data0+" in sources[dtypes.int64]


@needs_nvrtc
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64,
                                   dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.int8], ids=str)  # fmt: skip
def test_the_scatter_kernels_compile_with_nvrtc(dtype):
    """Every dtype's scatter (16- and 8-bit ones add in float32 or int32) compiles for sm_80 and sm_90."""
    ast = _scatter_ast(dtype, rows=50257, width=768)
    for arch in ("sm_80", "sm_90"):
        nvrtc_log(get_program(ast, CUDARenderer()).src, arch)
