"""bench/models.py's CPU rows at a tiny size, through the bench's own code (bench/model_rows.py): glassgrad's ResNet
and GPT-2 against the same models in PyTorch on the same weights and batch: the forward pass, the loss of a training
step, and the update that step makes to every parameter."""

import numpy as np
import pytest

from bench.model_rows import (
    GPT2_LR,
    GPT2_TINY,
    RESNET_LR,
    RESNET_TINY,
    Setting,
    gpt2_train,
    relative_error,
    resnet_train,
)
from glassgrad import Tensor, nn
from glassgrad.models.resnet import resnet18, resnet50
from glassgrad.nn.state import get_state_dict


def one_step(plan):
    """Each framework's side of a plan: its inference output, its first training step's loss, and its state dict
    before and after that step."""
    results = {}
    for fw in ("torch", "glassgrad"):
        side = plan.sides[fw]()
        before = side.state()
        forward = side.forward(0)
        loss = float(side.answer(side.step(0)))
        results[fw] = forward, loss, before, side.state()
    return results["glassgrad"], results["torch"]


def check_step(ours, theirs, tolerance, update_atol):
    """Inference output and loss within `tolerance` (relative); each element's update within 1e-3 of PyTorch's or
    update_atol (updates whose gradients are rounding noise: see the GPT-2 test)."""
    (forward, loss, before, after), (t_forward, t_loss, t_before, t_after) = ours, theirs
    assert forward.shape == t_forward.shape
    assert relative_error(forward, t_forward) < tolerance
    assert abs(loss - t_loss) <= tolerance * abs(t_loss)
    assert sorted(before) == sorted(t_before)
    for name in t_before:
        np.testing.assert_array_equal(before[name], t_before[name], err_msg=f"{name}: the weights differ at the start")
        moved, t_moved = after[name] - before[name], t_after[name] - t_before[name]
        assert moved.any() == t_moved.any(), f"{name}: updated in one framework only"
        np.testing.assert_allclose(moved, t_moved, rtol=1e-3, atol=update_atol, err_msg=f"{name}: the update differs")


def test_resnet18_tiny_step_matches_pytorch():
    """Width 8, a batch of 2 images of 16x16: forward (running statistics), SGD with momentum, batchnorm training."""
    plan = resnet_train(Setting(RESNET_TINY, batches=1), "fp32", arch="resnet18", cifar_stem=True)
    check_step(*one_step(plan), tolerance=1e-4, update_atol=1e-5 * RESNET_LR)


def test_gpt2_tiny_step_matches_pytorch():
    """2 layers, 32 wide, 2 heads, vocab 97, a batch of 2 x 16 tokens: logits, next-token loss, AdamW.

    AdamW's first step moves each element by lr * g / (|g| + 1e-8): where the gradient is rounding noise, so is the
    step. The attention's key bias is such a place (its gradient is zero in exact arithmetic: softmax ignores a shift
    shared by a query's scores); its elements move by ~1e-6 in both frameworks, differently. An element may differ by
    1% of the learning rate: a wrong update is off by about the learning rate itself."""
    plan = gpt2_train(Setting(GPT2_TINY, batches=1), "fp32")
    check_step(*one_step(plan), tolerance=1e-4, update_atol=1e-2 * GPT2_LR)


@pytest.mark.parametrize("make, blocks", [(resnet18, (2, 2, 2, 2)), (resnet50, (3, 4, 6, 3))])
def test_resnet_state_dict_has_torchvision_names(make, blocks):
    names = get_state_dict(make(width=8))
    assert list(names)[:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                               "bn1.num_batches_tracked"]  # fmt: skip
    assert "layer2.0.downsample.0.weight" in names and "layer2.0.downsample.1.running_var" in names
    assert "layer1.0.downsample.0.weight" not in names or make is resnet50  # a Bottleneck widens in layer1 too
    assert max(int(n.split(".")[1]) for n in names if n.startswith("layer3.")) == blocks[2] - 1
    assert names["fc.weight"].shape == (1000, 8 * 8 * (4 if make is resnet50 else 1))


def test_resnet_checks_its_input():
    with pytest.raises(ValueError, match=r"images must be \(batch, 3, height, width\)"):
        resnet18(width=8)(Tensor.zeros(2, 1, 16, 16))
    assert nn.state.get_parameters(resnet18(width=8, cifar_stem=True))[0].shape == (8, 3, 3, 3)
