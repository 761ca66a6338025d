"""How many kernels run (GlobalCounters), and realize, schedule, kernelize, contiguous and assign."""

import functools

import numpy as np
import pytest
import torch

from glassgrad import Device, GlobalCounters, Tensor, dtypes
from glassgrad.engine.realize import buffer_of
from glassgrad.models import gpt2
from glassgrad.nn.state import get_state_dict
from glassgrad.uop import Ops
from helpers import assert_matches, make_input


def realized(shape, device, seed=0):
    """A realized random float32 tensor and its values; the counters start from zero after it."""
    array, tensor = make_input(shape, device, seed=seed)
    tensor = tensor.contiguous().realize()
    GlobalCounters.reset()
    return array, tensor


def kernels_to_realize(*tensors) -> int:
    before = GlobalCounters.kernel_count
    tensors[0].realize(*tensors[1:])
    return GlobalCounters.kernel_count - before


# ---- fusion ----


def test_five_op_elementwise_chain_is_one_kernel(device):
    a, x = realized((4, 5), device)
    y = ((x + 1) * 2 - 0.5).exp() / 3
    assert kernels_to_realize(y) == 1
    assert_matches(y, np.exp((a + 1) * 2 - 0.5) / 3, rtol=1e-5)


def test_chain_over_two_inputs_is_one_kernel(device):
    (a, x), (b, y) = realized((3, 4), device), realized((4,), device, seed=1)
    z = (x * y + x).relu().sqrt()
    assert kernels_to_realize(z) == 1
    assert_matches(z, np.sqrt(np.maximum(a * b + a, 0)), rtol=1e-5)


def test_product_then_sum_is_one_kernel(device):
    (a, x), (b, y) = realized((3, 4), device), realized((3, 4), device, seed=1)
    z = (x * y).sum()
    assert kernels_to_realize(z) == 1
    assert_matches(z, (a * b).sum(), rtol=1e-5)


def test_elementwise_before_a_row_sum_is_one_kernel(device):
    a, x = realized((3, 5), device)
    z = ((x + 1) * 2).sum(axis=1)
    assert kernels_to_realize(z) == 1
    assert_matches(z, ((a + 1) * 2).sum(axis=1), rtol=1e-5)


def test_elementwise_after_a_reduce_fuses_with_it(device):
    a, x = realized((3, 5), device)
    z = x.sum(axis=1).exp() + 1
    assert kernels_to_realize(z) == 1
    assert_matches(z, np.exp(a.sum(axis=1)) + 1, rtol=1e-5)


VIEWS = {
    "T": (lambda x: x.T, lambda a: a.T, 1),
    "reshape": (lambda x: x.reshape(6, 2), lambda a: a.reshape(6, 2), 0),  # still row-major: read as it is
    "permute": (lambda x: x.permute(1, 0), lambda a: a.transpose(1, 0), 1),
    "expand": (
        lambda x: x.reshape(3, 1, 4).expand(3, 2, 4),
        lambda a: np.broadcast_to(a.reshape(3, 1, 4), (3, 2, 4)),
        1,
    ),
    "slice": (lambda x: x[::-1, 1:], lambda a: a[::-1, 1:], 1),
    "flip and pad": (lambda x: x.flip(1).pad(((1, 0), None)), lambda a: np.pad(a[:, ::-1], ((1, 0), (0, 0))), 1),
}


@pytest.mark.parametrize("ours, theirs, kernels_to_read", VIEWS.values(), ids=VIEWS.keys())
def test_views_of_a_realized_tensor_run_no_kernel_until_read(device, ours, theirs, kernels_to_read):
    a, x = realized((3, 4), device)
    v = ours(x)
    assert v.schedule() == [] and GlobalCounters.kernel_count == 0
    assert kernels_to_realize(v) == 0
    values = v.numpy()  # a view that is not row-major is copied into a contiguous buffer to be read
    assert GlobalCounters.kernel_count == kernels_to_read
    np.testing.assert_array_equal(values, theirs(a))


def test_identical_subgraphs_run_once(device):
    a, x = realized((4,), device)
    first, second = x * 4, x * 4
    assert first is not second and first.uop is second.uop
    assert kernels_to_realize(first, second) == 1
    assert first.uop is second.uop
    assert_matches(second, a * 4)


def test_realizing_one_of_two_identical_graphs_realizes_both(device):
    a, x = realized((4,), device)
    first, second = x * 4, x * 4
    first.realize()
    assert first.uop is second.uop
    GlobalCounters.reset()
    assert second.tolist() == (a * 4).tolist() and GlobalCounters.kernel_count == 0


def test_realizing_twice_runs_once(device):
    _, x = realized((3,), device)
    y = x + 1
    assert kernels_to_realize(y) == 1 and kernels_to_realize(y) == 0


def test_shared_input_read_by_two_outputs(device):
    a, x = realized((2, 3), device)
    y, z = x.exp(), x * 2
    assert kernels_to_realize(y, z) == 2
    assert_matches(y, np.exp(a), rtol=1e-5)
    assert_matches(z, a * 2)


def test_reduce_read_by_a_broadcast_gets_its_own_kernel(device):
    a, x = realized((3, 4), device)
    y = x - x.max(axis=1, keepdim=True)  # the max must finish before it is subtracted from each row
    assert kernels_to_realize(y) == 2
    assert_matches(y, a - a.max(axis=1, keepdims=True))


def test_global_counters_count_ops_and_memory(device):
    _, x = realized((8,), device)
    (x + 1).realize()
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops >= 8
    assert GlobalCounters.global_mem >= 2 * 8 * 4  # read 8 floats, wrote 8 floats
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0, 0)


# After realize(), a tensor made from multi-dimensional data is RESHAPE(COPY): the reshape becomes a realize point of
# its own, so creating the tensor runs a copy kernel on top of the COPY. A reshape of a copied buffer is only a view.
# (On PYTHON the host data is already a PYTHON buffer: no COPY, no extra kernel.)


@pytest.mark.parametrize("device", [pytest.param("CPU", marks=()), "PYTHON"])
def test_realizing_a_tensor_from_2d_data_runs_no_kernel(device):
    GlobalCounters.reset()
    Tensor(np.ones((2, 3), dtype=np.float32), device=device).realize()
    assert GlobalCounters.kernel_count == 0


# ---- schedule, kernelize, realize ----


def test_schedule_lists_the_kernels_realize_would_run(device):
    _, x = realized((3, 4), device)
    assert len((x + 1).schedule()) == 1
    assert len((x * 2).exp().sum(axis=0).schedule()) == 1
    y = x - x.sum(axis=1, keepdim=True)
    assert len(y.schedule()) == 2
    assert GlobalCounters.kernel_count == 0  # scheduling runs nothing
    y.realize()
    assert GlobalCounters.kernel_count == 2


def test_schedule_includes_copies_from_the_host(device):
    t = Tensor([1, 2, 3], device=device)
    items = (t + 1).schedule()
    assert len(items) == (2 if device != "PYTHON" else 1)  # host data lives on PYTHON: only other devices copy
    assert items[-1].ast.op is Ops.SINK


def test_kernelize_replaces_the_graph_with_kernels(device):
    _, x = realized((4,), device)
    y = x + 3 + 4
    assert y.uop.op is Ops.ADD
    y.kernelize()
    assert y.uop.op is Ops.ASSIGN and y.uop.src[0].op is Ops.BUFFER and y.uop.src[1].op is Ops.KERNEL
    assert GlobalCounters.kernel_count == 0  # nothing ran yet
    assert y.uop.src[1].arg.ast.op is Ops.SINK


def test_realize_returns_the_tensor_backed_by_a_buffer(device):
    _, x = realized((4,), device)
    y = x * 2
    assert y.realize() is y
    assert y.uop.op is Ops.BUFFER and y.uop.device == device


def test_realize_of_several_tensors_at_once(device):
    a, x = realized((4,), device)
    y, z = x + 1, x - 1
    y.realize(z)
    assert y.uop.op is Ops.BUFFER and z.uop.op is Ops.BUFFER
    assert_matches(z, a - 1)


def test_contiguous_copies_a_view_into_its_own_buffer(device):
    a, x = realized((2, 3), device)
    y = x.T.contiguous()
    assert kernels_to_realize(y) == 1
    assert y.uop.base.op is Ops.BUFFER and y.shape == (3, 2)
    assert_matches(y, a.T)
    assert kernels_to_realize(y.contiguous()) == 0  # already contiguous: nothing to do


# ---- assign ----


def test_assign_writes_in_place(device):
    a, x = realized((2, 3), device)
    buffer = buffer_of(x.uop.base)
    x.assign(x + 1).realize()
    assert buffer_of(x.uop.base) is buffer, "the same buffer holds the new values"
    assert_matches(x, a + 1)
    x.assign(x * 2).realize()
    assert_matches(x, (a + 1) * 2)


def test_assign_is_lazy_until_realized(device):
    a, x = realized((3,), device)
    x.assign(x + 1)
    assert GlobalCounters.kernel_count == 0
    assert_matches(x, a + 1)


# kernelize's _reads_target_elsewhere only looks for non-movement nodes that read the target through another view;
# a value that is nothing but a view of the target (x.T) is missed, so the kernel reads elements it already wrote.
def test_assign_of_own_transpose_gives_the_transpose(device):
    a, x = realized((3, 3), device)
    x.assign(x.T).realize()
    assert_matches(x, a.T)


def test_assign_of_math_on_own_transpose(device):
    a, x = realized((3, 3), device)
    x.assign(x.T * 2 + x).realize()
    assert_matches(x, a.T * 2 + a)


def test_assign_a_constant_and_a_tensor_of_another_shape(device):
    _, x = realized((2, 3), device)
    x.assign(5.0).realize()
    assert x.tolist() == [[5.0] * 3] * 2
    x.assign(Tensor([1.0, 2.0, 3.0], device=device)).realize()
    assert x.tolist() == [[1.0, 2.0, 3.0]] * 2


def test_in_place_operators_assign(device):
    a, x = realized((4,), device)
    x += 1
    x *= 3
    assert_matches(x.realize(), (a + 1) * 3, rtol=1e-6)


def test_assign_with_wrong_dtype_is_an_error(device):
    x = Tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match=r"assign: value has dtype dtypes.int .* dtypes.float; use .cast\(\)"):
        x.assign(Tensor([1, 2], device=device, dtype=dtypes.int32))


# ---- values a broadcast into a reduction would recompute ----


def test_costly_math_before_a_matmul_gets_its_own_kernel(device):
    (a, x), (b, w) = realized((8, 16), device), realized((16, 32), device, seed=1)
    y = x.exp() @ w  # fused, exp would run once per output column: 32 times per element
    assert kernels_to_realize(y) == 2
    assert_matches(y, np.exp(a) @ b, rtol=1e-4, atol=1e-4)


def test_cheap_math_before_a_matmul_stays_fused(device):
    (a, x), (b, w) = realized((8, 16), device), realized((16, 32), device, seed=1)
    y = (x * 2 + 1) @ w
    assert kernels_to_realize(y) == 1
    assert_matches(y, (a * 2 + 1) @ b, rtol=1e-4, atol=1e-4)


def test_costly_math_broadcast_a_few_times_stays_fused(device):
    (a, x), (b, w) = realized((8, 16), device), realized((16, 2), device, seed=1)
    y = x.exp() @ w  # two output columns: recomputing exp twice is cheaper than a round trip through memory
    assert kernels_to_realize(y) == 1
    assert_matches(y, np.exp(a) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("view", ["as_is", "transposed"])
def test_a_costly_16_bit_value_read_as_float32_is_stored_in_16_bits(device, view):
    """Under autocast a gradient is a 16-bit value that its matmul reads as float32: stored as 16 bits (half the
    bytes; the product multiplies 16-bit operands), widened as it loads, the same values."""
    if not Device[device].supports(dtypes.bfloat16):
        pytest.skip(f"{device} holds no bfloat16")
    (a, x), (b, w) = realized((8, 16) if view == "as_is" else (16, 8), device), realized((16, 32), device, seed=1)
    narrow = x.exp().cast(dtypes.bfloat16)
    y = (narrow if view == "as_is" else narrow.T).cast(dtypes.float32) @ w
    stored = [item.ast.src[0].src[0].dtype.base for item in y.schedule() if item.ast.op is Ops.SINK]
    assert stored == [dtypes.bfloat16, dtypes.float32]
    exp = torch.from_numpy(a).exp().bfloat16().float().numpy()
    assert_matches(y, (exp if view == "as_is" else exp.T) @ b, rtol=1e-5, atol=1e-5)


def test_bias_and_relu_after_a_matmul_read_by_the_next_get_their_own_kernel(device):
    (a, x), (b, w), (c, v) = realized((8, 16), device), realized((16, 12), device, 1), realized((12, 32), device, 2)
    bias_np = np.linspace(-1, 1, 12, dtype=np.float32)
    y = (x @ w + Tensor(bias_np, device=device)).relu() @ v  # fused, bias + ReLU would run 32 times per element
    assert kernels_to_realize(y) == 3  # the first product, its bias and ReLU, the second product
    assert_matches(y, np.maximum(a @ b + bias_np, 0) @ c, rtol=1e-4, atol=1e-4)


def test_attention_scores_are_one_reduction_not_a_stored_product():
    """GPT-2's attention: q @ k.T of the qkv projection is read by the mask, softmax's max and sum and the output.
    The scores get a buffer, never the elementwise product under them (GPT-2 small stored a batch x heads x T x T x 64
    product, then summed it: 83% of its forward). Its values are checked against PyTorch in test_bench_models."""
    cfg = gpt2.GPT2Config(vocab_size=100, n_ctx=64, n_embd=64, n_layer=1, n_head=4)
    model = gpt2.GPT2(cfg)
    for name, value in get_state_dict(model).items():  # weights of the right shapes, never read: only scheduled
        *path, attribute = name.split(".")
        owner = functools.reduce(lambda o, p: o[int(p)] if p.isdigit() else getattr(o, p), path, model)
        setattr(owner, attribute, Tensor.empty(*value.shape))
    logits = model(Tensor.empty(8, 64, dtype=dtypes.int32))
    scores = 8 * cfg.n_head * 64 * 64
    assert max(item.bufs[0].arg for item in logits.schedule()) <= max(scores, 8 * 64 * 4 * cfg.n_embd)


def test_bias_and_relu_after_a_matmul_read_a_few_times_stay_fused(device):
    (a, x), (b, w), (c, v) = realized((8, 16), device), realized((16, 12), device, 1), realized((12, 2), device, 2)
    bias_np = np.linspace(-1, 1, 12, dtype=np.float32)
    y = (x @ w + Tensor(bias_np, device=device)).relu() @ v  # two output columns: recomputing is cheaper
    assert kernels_to_realize(y) == 2
    assert_matches(y, np.maximum(a @ b + bias_np, 0) @ c, rtol=1e-4, atol=1e-4)


def test_a_convolutions_weight_gradient_reads_the_previous_layers_relu_from_a_buffer(device):
    """beautiful_mnist's second convolution: its input, ReLU(conv1 + bias), is read once per output channel and window
    position by the forward pass and by the weight gradient; it is computed once, into a buffer."""
    rng = np.random.default_rng(3)
    x_np, w1_np, w2_np = (
        rng.standard_normal(s).astype(np.float32) for s in ((2, 1, 10, 10), (4, 1, 3, 3), (6, 4, 3, 3))
    )
    b1_np = rng.standard_normal(4).astype(np.float32)
    x, w1, b1 = (Tensor(v, device=device) for v in (x_np, w1_np, b1_np))
    w2 = Tensor(w2_np, device=device, requires_grad=True)
    h = x.conv2d(w1, b1).relu()
    h.conv2d(w2).sum().backward()
    buffered = [item for item in w2.grad.schedule() if _reads_a_reduction_only_through_relu(item)]
    assert buffered, "no kernel computes the ReLU of the first convolution on its own"
    torch = pytest.importorskip("torch")
    tw2 = torch.tensor(w2_np, requires_grad=True)
    th = torch.nn.functional.conv2d(torch.tensor(x_np), torch.tensor(w1_np), torch.tensor(b1_np)).relu()
    torch.nn.functional.conv2d(th, tw2).sum().backward()
    assert_matches(w2.grad, tw2.grad.numpy(), rtol=1e-4, atol=1e-4)


def _reads_a_reduction_only_through_relu(item) -> bool:
    """A kernel with no reduction of its own whose stored value is a comparison-and-select (ReLU's shape)."""
    nodes = item.ast.toposort()
    return not any(n.op is Ops.REDUCE_AXIS for n in nodes) and any(n.op is Ops.WHERE for n in nodes)


@pytest.mark.parametrize("rows, kernels", [(256, 5), (8, 4)], ids=["large: a buffer", "small: recomputed"])
def test_a_relu_after_a_matmul_read_by_three_reductions_is_computed_once_when_large(device, rows, kernels):
    """ReLU(x @ w + b) read by three sums (a batchnorm's statistics and the pooling after it, say): each kernel would
    compute it again; with 2**16 elements or more it gets a buffer (kernelize's _shared_values), below that the extra
    kernel costs more than the math."""
    (a, x), (wn, w) = realized((rows, 4), device), realized((4, 256), device, seed=1)  # 256 x 256: 2**16
    bias_np = np.linspace(-1, 1, 256, dtype=np.float32)
    r = (x @ w + Tensor(bias_np, device=device)).relu()
    outs = [r.sum(0), (r * r).sum(0), r.max(1)]
    assert kernels_to_realize(*outs) == kernels  # the product, [the ReLU,] the three reductions
    rn = np.maximum(a @ wn + bias_np, 0)
    for got, want in zip(outs, [rn.sum(0), (rn * rn).sum(0), rn.max(1)]):
        assert_matches(got, want, rtol=1e-4, atol=1e-3)


def test_a_shared_value_read_through_one_permuted_view_is_stored_in_that_order(device):
    """The ReLU above, read by the three reductions through one reshape and permute (as a 2x2 max-pool's gradient,
    computed window by window, is read row by row): its buffer is written in the order they read it, so each of them
    reads it contiguously."""
    (a, x), (wn, w) = realized((256, 4), device), realized((4, 256), device, seed=1)
    r = (x @ w).relu().reshape(256, 16, 16).permute(0, 2, 1)
    outs = [r.sum(0), (r * r).sum(0), r.max(2)]
    items = outs[0].schedule(*outs[1:])
    (relu,) = [item for item in items if _reads_a_reduction_only_through_relu(item)]
    buffer = relu.bufs[0]
    for item in items:
        for load in (n for n in item.ast.toposort() if n.op is Ops.LOAD):
            if item.bufs[load.src[0].arg] is buffer:
                assert all(v.contiguous for v in load.src[1].arg.views), item.ast
    rn = np.maximum(a @ wn, 0).reshape(256, 16, 16).transpose(0, 2, 1)
    for got, want in zip(outs, [rn.sum(0), (rn * rn).sum(0), rn.max(2)]):
        assert_matches(got, want, rtol=1e-4, atol=1e-3)


def test_softmax_before_its_matmul_is_computed_once(device):
    (a, x), (b, v) = realized((4, 8, 8), device), realized((4, 8, 16), device, seed=1)
    y = x.softmax(-1) @ v
    kernels = kernels_to_realize(y)
    e = np.exp(a - a.max(-1, keepdims=True))
    assert_matches(y, (e / e.sum(-1, keepdims=True)) @ b, rtol=1e-5)
    assert kernels == 4  # max, sum of exp, the softmax itself, the matmul


def test_noopt_in_the_middle_of_a_run_compiles_plain_loops():
    from glassgrad import Context
    from glassgrad.engine import realize as engine

    x = Tensor(np.arange(64, dtype=np.float32).reshape(4, 16)).realize()
    (x.sum(axis=1) * 3).realize()
    with Context(NOOPT=1):
        (x.sum(axis=1) * 3).realize()  # the same AST: with NOOPT it must get a program of its own, unoptimized
    by_ast: dict = {}
    for (_, ast, noopt, *_), kernel in engine._kernels.items():
        by_ast.setdefault(ast, {})[noopt] = kernel.spec.opts
    assert any(opts[0] != () and opts[1] == () for opts in by_ast.values() if 0 in opts and 1 in opts)
