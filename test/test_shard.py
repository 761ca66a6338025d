"""Tensors split across devices (Tensor.shard): every op on CPU:0/CPU:1 shards matches the same op unsharded,
forward (NumPy) and backward (PyTorch), over shapes, split axes and ops; the errors name the devices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glassgrad import Device, Tensor, TinyJit, nn
from glassgrad.engine.realize import buffer_of
from glassgrad.helpers import getenv
from glassgrad.runtime.ops_cuda import init_driver
from glassgrad.uop.multi import lower_multi, multi
from glassgrad.uop.ops import Ops, UOp

TWO = ("CPU", "CPU:1")
THREE = ("CPU", "CPU:1", "CPU:2")
PAIRS = [TWO, THREE] + ([("CUDA", "CUDA:1")] if getenv("CUDA", 0) and init_driver() >= 2 else [])


@pytest.fixture(params=PAIRS, ids=lambda d: "+".join(d))
def devices(request):
    return request.param


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _axes(shape, count):
    """None, and each axis of `shape` that splits evenly over `count` devices."""
    return [None] + [a for a, n in enumerate(shape) if n % count == 0]


def _check(fn, tfn, shapes, devices, axes=None, seed=0):
    """fn over the inputs sharded along each axis (the first input; the others replicated) matches fn unsharded
    (NumPy forward, through tfn in PyTorch backward), and the first input's gradient is split as it is."""
    arrays = [_data(s, seed + i) for i, s in enumerate(shapes)]
    for axis in _axes(shapes[0], len(devices)) if axes is None else axes:
        xs = [Tensor(a, requires_grad=True) for a in arrays]
        sharded = [xs[0].shard(devices, axis)] + [x.to(devices) for x in xs[1:]]
        out = fn(*sharded)
        assert out.device == devices
        tx = [torch.tensor(a, requires_grad=True) for a in arrays]
        expected = tfn(*tx)
        np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
        weights = _data(expected.shape, seed + 7)
        (out * Tensor(weights).to(devices)).sum().backward()
        (expected * torch.tensor(weights)).sum().backward()
        for x, t in zip(xs, tx):
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


ELEMENTWISE = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "mul_relu": (lambda x, y: (x * y).relu(), lambda x, y: (x * y).relu()),
    "exp_div": (lambda x, y: x.exp() / (y * y + 1), lambda x, y: x.exp() / (y * y + 1)),
    "where_max": (
        lambda x, y: (x > y).where(x, y * 2).maximum(y),
        lambda x, y: torch.where(x > y, x, y * 2).maximum(y),
    ),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
@pytest.mark.parametrize("shape", [(6,), (4, 6), (2, 6, 3), (6, 1, 4)])
def test_elementwise(devices, name, shape):
    fn, tfn = ELEMENTWISE[name]
    _check(fn, tfn, [shape, shape], devices)


def test_both_sharded_alike_and_differently(devices):
    a, b = _data((6, 12)), _data((6, 12), 1)
    for axis_a, axis_b in [(0, 0), (1, 1), (0, 1), (None, 1), (1, None)]:
        x, y = Tensor(a).shard(devices, axis_a), Tensor(b).shard(devices, axis_b)
        np.testing.assert_allclose((x * y + x).numpy(), a * b + a, rtol=1e-6)


@pytest.mark.parametrize("shapes", [[(4, 6), (6,)], [(4, 6), (4, 1)], [(6, 1, 3), (1, 4, 3)], [(6,), ()]])
def test_broadcast(devices, shapes):
    _check(lambda x, y: x * y - y, lambda x, y: x * y - y, shapes, devices)


def _reduction(op: str, dim: int | None, keepdim: bool, torch_max: bool = False):
    if dim is None:
        return lambda x: getattr(x, op)()
    if torch_max and op == "max":
        return lambda x: x.max(dim, keepdim=keepdim).values
    return lambda x: getattr(x, op)(dim, keepdim=keepdim)


@pytest.mark.parametrize("shape", [(6,), (4, 6), (2, 6, 3), (12, 1, 6)])
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_each_axis(devices, shape, op, keepdim):
    for dim in [None, *range(len(shape))]:
        _check(_reduction(op, dim, keepdim), _reduction(op, dim, keepdim, torch_max=True), [shape], devices)


@pytest.mark.parametrize("shapes", [[(6, 4), (4, 5)], [(4, 6), (6, 6)], [(2, 6, 4), (4, 3)], [(6,), (6, 4)]])
def test_matmul_either_side(devices, shapes):
    _check(lambda x, y: x @ y, lambda x, y: x @ y, shapes, devices)
    _check(lambda y, x: x @ y, lambda y, x: x @ y, shapes[::-1], devices)


MOVEMENT = {
    "transpose": (lambda x: x.transpose(0, -1), lambda x: x.transpose(0, -1)),
    "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    "flatten": (lambda x: x.reshape(-1), lambda x: x.reshape(-1)),  # merges the split axis with those before it
    "split_last": (lambda x: x.reshape(6, 2, 6), lambda x: x.reshape(6, 2, 6)),
    "unsqueeze": (lambda x: x.reshape(6, 1, 2, 6, 1), lambda x: x.reshape(6, 1, 2, 6, 1)),
    "expand": (lambda x: x.reshape(6, 1, 2, 6).expand(6, 3, 2, 6), lambda x: x.reshape(6, 1, 2, 6).expand(6, 3, 2, 6)),
    "pad": (lambda x: x.pad(((1, 2), (0, 0), (2, 0))), lambda x: torch.nn.functional.pad(x, (2, 0, 0, 0, 1, 2))),
    "slice": (lambda x: x[1:5, :, ::2], lambda x: x[1:5, :, ::2]),
    "index": (lambda x: x[3], lambda x: x[3]),
    "flip": (lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
    "cat": (lambda x: x.cat(x * 2, dim=1), lambda x: torch.cat([x, x * 2], dim=1)),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement(devices, name):
    fn, tfn = MOVEMENT[name]
    _check(fn, tfn, [(6, 2, 6)], devices)


def test_softmax_and_cross_entropy(devices):
    labels = np.array([0, 2, 1, 2, 0, 1])

    def fn(x):
        return x.log_softmax(-1) * 2 + x.sparse_categorical_crossentropy(Tensor(labels).to(x.device))

    def tfn(x):
        return x.log_softmax(-1) * 2 + torch.nn.functional.cross_entropy(x, torch.tensor(labels))

    _check(fn, tfn, [(6, 3)], devices, axes=[None, 0])


def test_linear_sgd_step_on_a_sharded_batch(devices):
    """A data-parallel step (batch split, weights copied to each device) takes the unsharded step exactly."""
    x, y = _data((12, 5)), np.random.default_rng(3).integers(0, 3, 12)
    steps = []
    for split in (False, True):
        Tensor.manual_seed(0)
        layer = nn.Linear(5, 3)
        layer.weight.assign(Tensor(_data((3, 5), 4))).realize()
        if split:
            for p in (layer.weight, layer.bias):
                p.shard_(devices)
        optimizer = nn.optim.SGD([layer.weight, layer.bias], lr=0.1)
        xb, yb = Tensor(x), Tensor(y)
        if split:
            xb, yb = xb.shard(devices, 0), yb.shard(devices, 0)
        with Tensor.train():
            for _ in range(3):
                optimizer.zero_grad()
                loss = layer(xb).sparse_categorical_crossentropy(yb).backward()
                optimizer.step()
        assert layer.weight.device == (devices if split else Device.DEFAULT)
        steps.append((loss.item(), layer.weight.numpy(), layer.bias.numpy(), layer.weight.grad.numpy()))
    for plain, sharded in zip(*steps):
        np.testing.assert_allclose(sharded, plain, rtol=1e-5, atol=1e-6)


def test_weights_split_gradients_split_like_them(devices):
    """A weight split along its output axis (tensor parallel): its gradient is split the same way."""
    count = len(devices)
    w, x = _data((5, 2 * count)), _data((3, 5), 1)
    weight = Tensor(w, requires_grad=True).shard_(devices, 1)
    ((Tensor(x).to(devices) @ weight).tanh().sum()).backward()
    tw = torch.tensor(w, requires_grad=True)
    (torch.tensor(x) @ tw).tanh().sum().backward()
    grad = weight.grad.realize()
    assert grad.device == devices and grad.uop.op is Ops.MULTI and grad.uop.arg == 1
    assert [s.shape for s in grad.uop.src] == [(5, 2)] * count
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_each_shard_is_a_buffer_of_its_device(devices):
    x = Tensor(_data((4 * len(devices), 3))).shard(devices, 0).realize()
    buffers = [buffer_of(s.base) for s in x.uop.src]
    assert [b.device for b in buffers] == list(devices) and all(b.size == 12 for b in buffers)
    y = (x * 2).realize()
    assert [buffer_of(s.base).device for s in y.uop.src] == list(devices)
    assert Device["CPU:1"] is not Device["CPU"]


def test_gather_to_one_device_and_back(devices):
    a = _data((6, 12))
    x = Tensor(a).shard(devices, 0)
    for single in (x.to("CPU"), x.to(devices[-1])):
        assert isinstance(single.device, str)
        np.testing.assert_array_equal(single.numpy(), a)
    assert x.tolist() == a.tolist()
    np.testing.assert_array_equal(Tensor(a).to(devices).numpy(), a)
    np.testing.assert_array_equal(x.shard(devices, 1).numpy(), a)  # split again along another axis
    assert x.shard(devices, 1).uop.shape == (6, 12)
    np.testing.assert_array_equal(Tensor(a).shard(TWO, 0).shard(THREE, 0).numpy(), a)  # onto other devices


def test_gather_keeps_negative_zero_and_nan(devices):
    a = np.array([-0.0, np.nan, np.inf, -np.inf, 1.0, -0.0] * len(devices), dtype=np.float32)
    out = Tensor(a).shard(devices, 0).numpy()
    np.testing.assert_array_equal(out, a)
    assert np.signbit(out).tolist() == np.signbit(a).tolist()


def test_created_on_several_devices(devices):
    assert Tensor.ones(2, 3, device=devices).device == devices
    np.testing.assert_array_equal((Tensor.arange(6, device=devices) + Tensor([1] * 6, device=devices)).numpy(),
                                  np.arange(6) + 1)  # fmt: skip


def test_assign_into_shards(devices):
    a = _data((6, 2))
    x = Tensor(np.zeros((6, 2), np.float32)).shard(devices, 0).realize()
    before = [s.base for s in x.uop.src]
    x.assign(Tensor(a).shard(devices, 0) * 2).realize()
    np.testing.assert_array_equal(x.numpy(), a * 2)
    x.assign(Tensor(a).to(devices)).realize()  # a replicated value is split like the target
    np.testing.assert_array_equal(x.numpy(), a)
    assert [buffer_of(s.base) for s in x.uop.src] == [buffer_of(b) for b in before]  # written in place
    source = Tensor(a)
    y = source.shard(devices, 0)
    y.assign(y * 0).realize()
    np.testing.assert_array_equal(source.numpy(), a)  # the shards are copies, not views of the source


def test_errors_name_both_device_sets():
    x = Tensor(_data((6, 4))).shard(TWO, 0)
    with pytest.raises(RuntimeError, match=r"\('CPU', 'CPU:1'\) and CPU"):
        x + Tensor(_data((6, 4)), device="CPU")
    with pytest.raises(ValueError, match=r"\('CPU', 'CPU:1'\) and \('CPU', 'CPU:1', 'CPU:2'\)"):
        x + Tensor(_data((6, 4))).shard(THREE, 0)
    with pytest.raises(RuntimeError, match=r"matmul: .*\('CPU', 'CPU:1'\) and CPU"):
        x @ Tensor(_data((4, 2)), device="CPU")
    with pytest.raises(RuntimeError, match="assign: value is on CPU but the tensor is on"):
        x.assign(Tensor(_data((6, 4)), device="CPU"))


def test_bad_shard_arguments():
    x = Tensor(_data((5, 4)))
    with pytest.raises(ValueError, match=r"dimension 0 of shape \(5, 4\) has size 5, which does not split evenly"):
        x.shard(TWO, 0)
    with pytest.raises(RuntimeError, match="does not split evenly over the 3 devices"):
        x.shard(THREE, 1)
    with pytest.raises(IndexError, match="out of range"):
        x.shard(TWO, 2)
    with pytest.raises(ValueError, match="device CPU:1 appears twice"):
        x.shard(("CPU:1", "cpu:1"))
    with pytest.raises(ValueError, match="unknown device 'NOPE'"):
        x.shard(("CPU", "NOPE"))
    with pytest.raises(ValueError, match="a tuple of device names"):
        x.shard("CPU")
    with pytest.raises(ValueError, match="0-d tensor"):
        Tensor(1.0).shard(TWO, 0)


# ---- the lowering, rule by rule ----


def _buffers(shape, devices):
    return multi([Tensor(_data(shape, i)).to(d).realize().uop for i, d in enumerate(devices)], 0)


def test_lowering_an_elementwise_op_runs_it_per_shard():
    x = _buffers((2, 3), TWO)
    lowered = lower_multi(x.alu(Ops.ADD, x))
    assert lowered.op is Ops.MULTI and lowered.arg == 0
    assert [s.op for s in lowered.src] == [Ops.ADD, Ops.ADD] and [s.device for s in lowered.src] == list(TWO)


def test_lowering_a_reduction_over_the_split_axis_all_reduces():
    x = _buffers((2, 3), TWO)
    lowered = lower_multi(UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.ADD, (0,))))
    assert lowered.op is Ops.MULTI and lowered.arg is None and lowered.shape == (1, 3)
    for shard in lowered.src:  # its own partial sum plus the other device's, copied over
        assert shard.op is Ops.ADD and any(n.op is Ops.COPY for n in shard.toposort())


def test_lowering_a_reduction_over_another_axis_stays_split():
    x = _buffers((2, 3), TWO)
    lowered = lower_multi(UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.MAX, (1,))))
    assert lowered.arg == 0 and [s.shape for s in lowered.src] == [(2, 1), (2, 1)]


def test_lowering_a_reshape_moves_or_gathers_the_split():
    x = _buffers((2, 6), TWO)  # a (4, 6) tensor split along axis 0
    kept = lower_multi(UOp(Ops.RESHAPE, x.dtype, (x,), (2, 2, 6)))
    assert kept.arg == 0 and [s.shape for s in kept.src] == [(1, 2, 6)] * 2
    flat = lower_multi(UOp(Ops.RESHAPE, x.dtype, (x,), (24,)))
    assert flat.arg == 0 and [s.shape for s in flat.src] == [(12,)] * 2
    merged = lower_multi(UOp(Ops.RESHAPE, x.dtype, (UOp(Ops.PERMUTE, x.dtype, (x,), (1, 0)),), (24,)))
    assert merged.arg is None and [s.shape for s in merged.src] == [(24,)] * 2  # gathered on each device


def test_lowering_a_copy_to_one_device_gathers():
    x = _buffers((2, 3), TWO)
    gathered = lower_multi(UOp(Ops.COPY, x.dtype, (x, UOp(Ops.DEVICE, arg="CPU"))))
    assert gathered.device == "CPU" and gathered.shape == (4, 3)
    assert sum(n.op is Ops.COPY for n in gathered.toposort()) == 1  # only the other device's shard moves


def test_lowering_a_scatter_add_runs_it_once_and_copies_the_result():
    """On a GPU a scatter-add's atomics add in any order: a device computing its own would hold a replica an ulp
    apart (a data-parallel embedding's weights drifted apart so); the first device computes, the others copy."""
    base = multi([Tensor.zeros(5, 3).to(d).contiguous().realize().uop for d in TWO], None)
    index = multi([Tensor([[0, 4, 4], [1, 1, 0]]).to(d).realize().uop for d in TWO], 0)  # a (4, 3) index, split
    added = _buffers((2, 3), TWO)
    lowered = lower_multi(UOp(Ops.SCATTER_ADD, base.dtype, (base, index, added), 0))
    assert lowered.op is Ops.MULTI and lowered.arg is None and [s.device for s in lowered.src] == list(TWO)
    scatters = {n for n in UOp(Ops.SINK, base.dtype, lowered.src).toposort() if n.op is Ops.SCATTER_ADD}
    assert len(scatters) == 1 and next(iter(scatters)).device == TWO[0]
    assert any(n.op is Ops.COPY for n in lowered.src[1].toposort())  # the second device's is a copy


def test_sgd_steps_in_tinyjit_match_unjitted(devices):
    """A jitted data-parallel step: each call's sharded batch is its own (the shards' buffers are swapped in)."""
    batches = [_data((6, 4), 10 + i) for i in range(4)]
    results = []
    for jit in (False, True):
        weight = Tensor(_data((4, 3), 5)).shard_(devices)
        optimizer = nn.optim.SGD([weight], lr=0.1, momentum=0.9)

        def step(x: Tensor, weight: Tensor = weight, optimizer: nn.optim.SGD = optimizer) -> Tensor:
            optimizer.zero_grad()
            loss = (x @ weight).tanh().square().mean().backward()
            optimizer.step()
            return loss.realize()

        run = TinyJit(step) if jit else step
        with Tensor.train():
            results.append([run(Tensor(b).shard(devices, 0)).item() for b in batches] + [weight.numpy()])
    for plain, jitted in zip(*results):
        np.testing.assert_allclose(jitted, plain, rtol=1e-6)


def test_state_made_like_a_sharded_tensor_is_split_like_it(devices):
    w = Tensor(_data((5, 2 * len(devices)))).shard(devices, 1)
    for made in (w.zeros_like(), w.ones_like(), w.rand_like()):
        made.realize()
        assert made.device == devices and made.uop.arg == 1 and made.uop.src[0].shape == (5, 2)
    momentum = nn.optim.Adam([w.requires_grad_()]).m[0]
    assert momentum.uop.arg == 1 and momentum.numpy().tolist() == np.zeros((5, 2 * len(devices))).tolist()


def test_embedding_and_tensor_index_on_a_sharded_batch(devices):
    """A lookup by index (its gradient a SCATTER_ADD, run on whole copies) matches PyTorch's."""
    count, w = len(devices), _data((10, 4))
    idx = np.random.default_rng(1).integers(0, 10, (2 * count, 3))
    emb = nn.Embedding(10, 4)
    emb.weight.assign(Tensor(w)).realize()
    emb.weight.shard_(devices)
    out = emb(Tensor(idx).shard(devices, 0))
    (out * Tensor(_data(out.shape, 2)).to(devices)).sum().backward()
    temb = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=False)
    tout = temb(torch.tensor(idx))
    (tout * torch.tensor(_data(out.shape, 2))).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
    np.testing.assert_allclose(emb.weight.grad.numpy(), temb.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    x = Tensor(_data((2 * count, 3))).shard(devices, 0)
    picks = Tensor([0, 2 * count - 1, 1]).to(devices)
    np.testing.assert_array_equal(x[picks].numpy(), x.numpy()[[0, 2 * count - 1, 1]])


def test_empty_on_several_devices(devices):
    empty = Tensor.empty(4, 2, device=devices).realize()
    assert empty.device == devices and [buffer_of(s.base).device for s in empty.uop.src] == list(devices)
