"""autocast and GradScaler (glassgrad/autocast.py, glassgrad/amp.py) beside PyTorch's torch.autocast and
torch.amp.GradScaler: which ops compute in 16 bits, their values and gradients, and loss scaling's skips and scale."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, autocast, dtypes, nn
from glassgrad.amp import GradScaler, is_autocast_enabled
from glassgrad.autocast import autocast_dtype

LOW = {"bfloat16": (dtypes.bfloat16, torch.bfloat16), "float16": (dtypes.float16, torch.float16)}


def _pair(*shape, seed=0, grad=True):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


@pytest.mark.parametrize("low", list(LOW))
def test_contractions_compute_in_16_bits_and_the_rest_keeps_its_dtype(low):
    ours_low, _ = LOW[low]
    x, w = Tensor.randn(4, 8), Tensor.randn(3, 8)
    with autocast(dtype=ours_low):
        assert (x @ w.T).dtype == ours_low and x.linear(w, Tensor.randn(3)).dtype == ours_low
        assert Tensor.randn(1, 3, 5, 5).conv2d(Tensor.randn(2, 3, 3, 3), Tensor.randn(2)).dtype == ours_low
        assert Tensor.randn(1, 3, 5).conv_transpose1d(Tensor.randn(3, 2, 3)).dtype == ours_low if hasattr(
            Tensor, "conv_transpose1d") else True  # fmt: skip
        y = x @ w.T
        assert (y + 1).dtype == ours_low and y.relu().dtype == ours_low  # elementwise ops keep the 16-bit dtype
        # CUDA autocast's float32 list, on every device: softmax, norms, losses
        for out in (y.softmax(-1), y.log_softmax(-1), y.logsumexp(-1), y.layernorm(), y.layer_norm(3),
                    y.sparse_categorical_crossentropy(Tensor([0, 1, 2, 0])), y.mse_loss(y.detach())):  # fmt: skip
            assert out.dtype == dtypes.float32
        assert (Tensor.randn(2, 2, dtype=dtypes.float64) @ Tensor.randn(2, 2, dtype=dtypes.float64)).dtype == (
            dtypes.float64)  # float64 is never cast, as in PyTorch  # fmt: skip
        assert (Tensor([[1, 2]]) @ Tensor([[3], [4]])).dtype == dtypes.int32  # nor are integers
    assert (x @ w.T).dtype == dtypes.float32  # only inside


def test_enabled_nesting_decorator_and_bad_dtype():
    assert not is_autocast_enabled()
    with autocast(dtype="bfloat16"):
        assert autocast_dtype() == dtypes.bfloat16
        with autocast(enabled=False):
            assert not is_autocast_enabled() and (Tensor.ones(2, 2) @ Tensor.ones(2, 2)).dtype == dtypes.float32
        with autocast("cuda"):  # PyTorch's default for a GPU
            assert autocast_dtype() == dtypes.float16
        assert autocast_dtype() == dtypes.bfloat16
    assert autocast_dtype() is None

    @autocast(dtype=dtypes.float16)
    def f(a):
        return a @ a

    assert f(Tensor.ones(2, 2)).dtype == dtypes.float16
    with pytest.raises(TypeError, match="autocast: dtype must be float16 or bfloat16, got dtypes.float"):
        autocast(dtype=dtypes.float32)


@pytest.mark.parametrize("low", list(LOW))
def test_a_two_layer_classifier_beside_torch_autocast(low):
    """Values and float32 gradients of linear -> relu -> linear -> cross_entropy: each linear as torch.autocast
    computes it (16-bit operands, the output rounded once), the loss in float32."""
    ours_low, torch_low = LOW[low]
    x, tx = _pair(16, 24, seed=1, grad=False)
    w1, tw1 = _pair(32, 24, seed=2)
    b1, tb1 = _pair(32, seed=3)
    w2, tw2 = _pair(10, 32, seed=4)
    labels = np.random.default_rng(5).integers(0, 10, 16)
    with autocast(dtype=ours_low):
        loss = x.linear(w1, b1).relu().linear(w2).sparse_categorical_crossentropy(Tensor(labels))
    loss.backward()
    with torch.autocast("cpu", dtype=torch_low):
        logits = F.linear(F.relu(F.linear(tx, tw1, tb1)), tw2)
        assert logits.dtype == torch_low
        tloss = F.cross_entropy(logits, torch.tensor(labels))
    tloss.backward()
    assert loss.dtype == dtypes.float32 and w1.grad.dtype == dtypes.float32
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-2)
    # 16-bit gradients of a sum over the batch: each side rounds its terms (+-0.4) to 16 bits in its own order, so a
    # sum that cancels to 0.01 is as far off as a few of those roundings (bfloat16 keeps 8 bits, float16 11)
    scale = {"bfloat16": 3e-2, "float16": 4e-3}[low]
    for ours, theirs in ((w1, tw1), (b1, tb1), (w2, tw2)):
        want = theirs.grad.numpy()
        np.testing.assert_allclose(ours.grad.numpy(), want, rtol=scale, atol=scale * np.abs(want).max())


def test_a_convolution_beside_torch_autocast():
    x, tx = _pair(2, 3, 9, 7, seed=6, grad=True)
    w, tw = _pair(4, 3, 3, 3, seed=7)
    with autocast(dtype=dtypes.bfloat16):
        out = x.conv2d(w, stride=2, padding=1)
    (out.float() * out.float()).sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tout = F.conv2d(tx, tw, stride=2, padding=1)
    (tout.float() * tout.float()).sum().backward()
    np.testing.assert_allclose(out.float().numpy(), tout.float().detach().numpy(), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=5e-2, atol=5e-2)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=5e-2, atol=5e-2)


def _scaler_run(ours: bool, grads_per_step: list[list[float]], **kwargs):
    """Steps of SGD(lr 0.5) on one parameter whose gradient is given (times the scale, as backward of a scaled loss
    gives it); the parameter and the scale after each step."""
    if ours:
        p = Tensor([1.0, 2.0], requires_grad=True)
        opt, scaler = nn.optim.SGD([p], lr=0.5), GradScaler(**kwargs)
    else:
        p = torch.tensor([1.0, 2.0], requires_grad=True)
        opt, scaler = torch.optim.SGD([p], lr=0.5), torch.amp.GradScaler("cpu", **kwargs)
    seen = []
    for g in grads_per_step:
        lib = Tensor if ours else torch.tensor
        scaler.scale((p * lib(g)).sum()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        seen.append((p.detach().numpy().tolist(), scaler.get_scale()))
    return seen


def test_grad_scaler_skips_overflowed_steps_and_adjusts_the_scale_as_torch():
    steps = [[1.0, -1.0], [float("inf"), 1.0], [0.5, 0.25], [float("nan"), 0.0], [1.0, 1.0], [2.0, 2.0], [1.0, 3.0]]
    kwargs = dict(init_scale=2.0**10, growth_interval=2, backoff_factor=0.25, growth_factor=4.0)
    assert _scaler_run(True, steps, **kwargs) == _scaler_run(False, steps, **kwargs)


def test_grad_scaler_keeps_float16_gradients_that_would_underflow():
    """float32 weights, a float16 linear layer under autocast and a loss whose gradient (1e-8) is below float16's
    smallest step: the layer's output gradient rounds to zero in float16 without scaling, and the weight's gradient
    with it; scaled and unscaled, it is right."""

    def weight_gradient(scaler: GradScaler | None) -> np.ndarray:
        w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        with autocast(dtype=dtypes.float16):
            y = Tensor([[1.0, 0.5]]).linear(w)
        loss = (y.float() * 1e-8).sum()
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(nn.optim.SGD([w], lr=1.0))
        return w.grad.numpy()

    assert weight_gradient(None).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    np.testing.assert_allclose(weight_gradient(GradScaler(init_scale=2.0**20)), [[1e-8, 5e-9]] * 2, rtol=2e-3)
    half = Tensor([1.0], dtype=dtypes.float16, requires_grad=True)
    half.sum().backward()
    with pytest.raises(ValueError, match="float16 gradients cannot be unscaled"):
        GradScaler().unscale_(nn.optim.SGD([half], lr=1.0))


def test_grad_scaler_errors_and_disabled():
    with pytest.raises(ValueError, match="growth_factor > 1"):
        GradScaler(growth_factor=1.0)
    p = Tensor([1.0], requires_grad=True)
    opt, scaler = nn.optim.SGD([p], lr=1.0), GradScaler()
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.unscale_(opt)
    with pytest.raises(TypeError, match="expected a Tensor"):
        scaler.scale(3.0)
    off = GradScaler(enabled=False)
    assert off.get_scale() == 1.0 and off.scale(p) is p and not off.is_enabled()
    state = scaler.state_dict()
    other = GradScaler(init_scale=1.0)
    other.load_state_dict(state)
    assert other.get_scale() == scaler.get_scale() == 2.0**16
