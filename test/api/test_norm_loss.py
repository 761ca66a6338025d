"""Normalization, attention and losses against PyTorch, forward values and gradients (test/torch_check.py)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import GlobalCounters, Tensor, dtypes
from torch_check import check_op

LOOSE = {"atol": 2e-5, "rtol": 2e-5}  # float32 results that sum or normalize many terms
REDUCTIONS = ("mean", "sum", "none")


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _uniform(shape, low=-2.0, high=2.0, seed=0) -> np.ndarray:
    return _rng(seed).uniform(low, high, shape).astype(np.float32)


def _classes(shape, n_classes, seed=1, ignore=None, ignore_index=-100) -> np.ndarray:
    """Random class indices (int32) of `shape`; positions where `ignore` is true hold ignore_index."""
    t = _rng(seed).integers(0, n_classes, shape).astype(np.int32)
    if ignore is not None:
        t[ignore] = ignore_index
    return t


def _some_ignored(shape, seed=2) -> np.ndarray:
    """A mask that ignores about a third of the positions, but never all of them."""
    mask = _rng(seed).random(shape) < 0.35
    mask.flat[0] = False
    return mask


def _positive(shape, seed=5) -> np.ndarray:
    return _uniform(shape, 0.2, 2.0, seed)


C, T, S = "contiguous", "transposed", "strided"


# ---- layernorm, layer_norm, rms_norm ----


@pytest.mark.parametrize("shape, layout", [((1, 1), C), ((3, 5), C), ((2, 3, 7), C), ((3, 5), T),
                                           ((2, 3, 7), S)], ids=str)  # fmt: skip
def test_layernorm_matches_layer_norm_without_affine(shape, layout):
    check_op([shape], lambda x: F.layer_norm(x, x.shape[-1:]), lambda x: x.layernorm(), layout=layout, **LOOSE)


def test_layernorm_over_several_axes_and_eps():
    check_op([(2, 3, 4)], lambda x: F.layer_norm(x, (3, 4), eps=1e-3), lambda x: x.layernorm((1, 2), eps=1e-3),
             **LOOSE)  # fmt: skip
    check_op([(3, 4, 2)], lambda x: F.layer_norm(x.transpose(1, 2), (4,)).transpose(1, 2),
             lambda x: x.layernorm(axis=1), **LOOSE)  # fmt: skip


@pytest.mark.parametrize("shape, normalized, layout", [
    ((1, 1), (1,), C), ((4, 5), (5,), C), ((2, 3, 4), (3, 4), C), ((5, 2, 3), (3,), T), ((2, 3, 4), (3, 4), S),
], ids=str)  # fmt: skip
def test_layer_norm_with_weight_and_bias(shape, normalized, layout):
    check_op([shape, normalized, normalized], lambda x, w, b: F.layer_norm(x, normalized, w, b),
             lambda x, w, b: x.layer_norm(normalized, w, b), layout=layout, **LOOSE)  # fmt: skip


def test_layer_norm_with_weight_only_and_eps():
    check_op([(4, 5), (5,)], lambda x, w: F.layer_norm(x, (5,), w, eps=0.1),
             lambda x, w: x.layer_norm(5, weight=w, eps=0.1), **LOOSE)  # fmt: skip


@pytest.mark.parametrize("shapes, layout", [([(1, 1), (1,)], C), ([(3, 5), (5,)], C), ([(2, 3, 4), (3, 4)], C),
                                            ([(7, 1, 3), (3,)], T), ([(3, 5), (5,)], S)], ids=str)  # fmt: skip
def test_rms_norm(shapes, layout):
    check_op(shapes, lambda x, w: F.rms_norm(x, w.shape, w), lambda x, w: x.rms_norm(w.shape, w), layout=layout,
             **LOOSE)  # fmt: skip


def test_rms_norm_eps():
    check_op([(3, 4)], lambda x: F.rms_norm(x, (4,), eps=1e-2), lambda x: x.rms_norm(4, eps=1e-2), **LOOSE)
    tiny = np.full((2, 3), 1e-4, np.float32)  # mean(x**2) = 1e-8: the default eps (float32's, 1.19e-7) matters
    check_op([], lambda x: F.rms_norm(x, (3,)), lambda x: x.rms_norm(3), inputs=[tiny], **LOOSE)


# ---- group_norm, instance_norm ----


@pytest.mark.parametrize("shape, groups, layout", [
    ((2, 6, 5), 3, C), ((1, 4, 3, 3), 2, C), ((3, 4, 2), 2, C), ((4, 2), 1, C), ((2, 6, 5), 3, T), ((2, 4, 3), 1, S),
], ids=str)  # fmt: skip
def test_group_norm(shape, groups, layout):
    c = shape[1:2]
    check_op([shape, c, c], lambda x, w, b: F.group_norm(x, groups, w, b), lambda x, w, b: x.group_norm(groups, w, b),
             layout=layout, **LOOSE)  # fmt: skip


def test_group_norm_without_affine():
    check_op([(2, 4, 3)], lambda x: F.group_norm(x, 2, eps=0.01), lambda x: x.group_norm(2, eps=0.01), **LOOSE)


@pytest.mark.parametrize("shape, layout", [((2, 3, 5), C), ((1, 2, 3, 3), C), ((3, 1, 4), S)], ids=str)
def test_instance_norm(shape, layout):
    c = shape[1:2]
    check_op([shape, c, c], lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
             lambda x, w, b: x.instance_norm(weight=w, bias=b), layout=layout, **LOOSE)  # fmt: skip


def _running_stats_match(norm: str, x: np.ndarray, realize_together: bool) -> None:
    """Two training steps of batch_norm or instance_norm update the running stats as torch's do; then eval uses them.

    The update is a lazy assign; `realize_together` realizes it with the output (as an optimizer step would),
    otherwise the output is realized first."""
    c = x.shape[1]
    ours_mean, ours_var = Tensor(_uniform((c,), seed=1)), Tensor(_positive((c,)))
    torch_mean, torch_var = torch.tensor(ours_mean.numpy()), torch.tensor(ours_var.numpy())
    train = {"training": True} if norm == "batch_norm" else {}
    for step in range(2):  # twice: the second update reads the first one's result
        out = getattr(Tensor(x + step), norm)(ours_mean, ours_var, momentum=0.2, **train)
        if realize_together:
            out.realize(ours_mean, ours_var)
        expected = getattr(F, norm)(torch.tensor(x + step), torch_mean, torch_var, momentum=0.2, **train)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(ours_mean.numpy(), torch_mean.numpy(), atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(ours_var.numpy(), torch_var.numpy(), atol=1e-6, rtol=1e-5)
    evaluate = {"training": False} if norm == "batch_norm" else {"use_input_stats": False}
    out = getattr(Tensor(x).realize(), norm)(ours_mean, ours_var, **evaluate)
    expected = getattr(F, norm)(torch.tensor(x), torch_mean, torch_var, **evaluate)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("norm", ["batch_norm", "instance_norm"])
def test_running_stats_update_like_torch(norm):
    _running_stats_match(norm, _uniform((4, 3, 5)), realize_together=True)


def test_running_stats_update_when_the_output_is_realized_first():
    _running_stats_match("batch_norm", _uniform((4, 3, 5)), realize_together=False)


# ---- batch_norm (torch) and batchnorm (tinygrad) ----


@pytest.mark.parametrize("shape, layout", [((1, 1), C), ((4, 3), C), ((2, 3, 5), C), ((2, 2, 3, 3), T)], ids=str)
def test_batch_norm_eval_uses_running_stats(shape, layout):
    c = shape[1]
    inputs = [_uniform(shape), _uniform((c,), seed=1), _positive((c,)), _uniform((c,), seed=3), _uniform((c,), seed=4)]
    check_op([], lambda x, m, v, w, b: F.batch_norm(x, m.detach(), v.detach(), w, b),
             lambda x, m, v, w, b: x.batch_norm(m, v, w, b), inputs=inputs, layout=layout, **LOOSE)  # fmt: skip


@pytest.mark.parametrize("shape, layout", [((2, 1), C), ((5, 3), C), ((2, 3, 5), C), ((3, 2, 2, 3), S)], ids=str)
def test_batch_norm_training_uses_batch_stats(shape, layout):
    c = shape[1:2]
    check_op([shape, c, c], lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3),
             lambda x, w, b: x.batch_norm(None, None, w, b, training=True, eps=1e-3), layout=layout,
             **LOOSE)  # fmt: skip


def _batchnorm_reference(shape, axes):
    view = tuple(s if i in axes else 1 for i, s in enumerate(shape))
    return lambda x, w, m, s, b: (x - m.reshape(view)) * w.reshape(view) * s.reshape(view) + b.reshape(view)


@pytest.mark.parametrize("shape, axis, layout", [
    ((4, 3), 1, C), ((2, 3, 5), 1, C), ((2, 3, 5), -1, C), ((2, 3, 4), (1, 2), C), ((4, 3), 1, T), ((2, 3, 5), 1, S),
], ids=str)  # fmt: skip
def test_batchnorm_with_given_statistics(shape, axis, layout):
    axes = (axis % len(shape),) if isinstance(axis, int) else axis
    stat = tuple(shape[a] for a in axes)
    check_op([shape, stat, stat, stat, stat], _batchnorm_reference(shape, axes),
             lambda x, w, m, s, b: x.batchnorm(w, b, m, s, axis=axis), layout=layout)  # fmt: skip


def test_batchnorm_without_weight_and_with_broadcast_invstd():
    check_op([(2, 3, 4), (3,), (1, 3, 1)], lambda x, m, s: (x - m.reshape(1, 3, 1)) * s,
             lambda x, m, s: x.batchnorm(None, None, m, s))  # fmt: skip


# ---- scaled_dot_product_attention ----


@pytest.mark.parametrize("shapes, layout", [
    ([(1, 1), (1, 1), (1, 1)], C),
    ([(3, 4), (5, 4), (5, 2)], C),
    ([(2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)], C),
    ([(2, 1, 3, 4), (1, 4, 5, 4), (1, 4, 5, 3)], C),  # batch dimensions broadcast
    ([(3, 4), (5, 4), (5, 2)], T),
    ([(2, 3, 4), (2, 5, 4), (2, 5, 3)], S),
], ids=str)  # fmt: skip
def test_sdpa(shapes, layout):
    check_op(shapes, F.scaled_dot_product_attention, lambda q, k, v: q.scaled_dot_product_attention(k, v),
             layout=layout, **LOOSE)  # fmt: skip


@pytest.mark.parametrize("lengths", [(1, 1), (4, 4), (3, 5), (5, 3)], ids=str)
def test_sdpa_causal(lengths):
    L, S = lengths
    check_op([(2, L, 3), (2, S, 3), (2, S, 4)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), **LOOSE)  # fmt: skip


def test_sdpa_scale():
    check_op([(2, 3, 4), (2, 5, 4), (2, 5, 2)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
             lambda q, k, v: q.scaled_dot_product_attention(k, v, scale=0.3), **LOOSE)  # fmt: skip


def _check_sdpa_with_mask(q_shape, k_shape, v_shape, mask, detach_mask=False):
    inputs = [_uniform(q_shape, seed=1), _uniform(k_shape, seed=2), _uniform(v_shape, seed=3), mask]
    check_op([], lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m.detach() if detach_mask else m),
             lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m), inputs=inputs, **LOOSE)  # fmt: skip


@pytest.mark.parametrize("mask_shape", [(3, 5), (2, 1, 5)], ids=str)
def test_sdpa_bool_mask(mask_shape):
    mask = _rng(7).random(mask_shape) < 0.6
    mask[..., 0] = True  # every query sees at least one key
    _check_sdpa_with_mask((2, 3, 4), (2, 5, 4), (2, 5, 3), mask)


def test_sdpa_bool_mask_that_hides_every_key_gives_zero_like_torch():
    mask = np.ones((3, 5), bool)
    mask[1] = False
    _check_sdpa_with_mask((3, 4), (5, 4), (5, 2), mask)


@pytest.mark.parametrize("mask_shape, layout", [((2, 3, 5), C), ((3, 5), S)], ids=str)
def test_sdpa_float_mask_is_added_and_gets_a_gradient(mask_shape, layout):
    check_op([(2, 3, 4), (2, 5, 4), (2, 5, 3), mask_shape],
             lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m), layout=layout, **LOOSE)  # fmt: skip


def test_sdpa_float_mask_with_minus_infinity():
    mask = np.where(_rng(3).random((3, 5)) < 0.5, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    _check_sdpa_with_mask((3, 4), (5, 4), (5, 2), mask, detach_mask=True)


def test_sdpa_grouped_query_attention():
    check_op([(2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 3)],
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
             lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), **LOOSE)  # fmt: skip


def test_sdpa_dropout_only_in_training():
    q, k = Tensor(_uniform((2, 3, 4), seed=1)), Tensor(_uniform((2, 6, 4), seed=2))
    identity = Tensor(np.broadcast_to(np.eye(6, dtype=np.float32), (2, 6, 6)).copy())  # output = attention weights
    weights = q.scaled_dot_product_attention(k, identity).numpy()
    with Tensor.train(False):
        np.testing.assert_allclose(q.scaled_dot_product_attention(k, identity, dropout_p=0.5).numpy(), weights)
    with Tensor.train():
        Tensor.manual_seed(0)
        dropped = q.scaled_dot_product_attention(k, identity, dropout_p=0.5).numpy()
    kept = dropped != 0
    assert 0 < kept.sum() < kept.size, "dropout_p=0.5 should drop some weights and keep others"
    np.testing.assert_allclose(dropped[kept], weights[kept] / 0.5, rtol=1e-6)


# ---- cross_entropy ----


def _class_dim(shape):
    return 0 if len(shape) == 1 else 1


def _index_shape(shape):
    return shape[: _class_dim(shape)] + shape[_class_dim(shape) + 1 :]


@pytest.mark.parametrize("shape, reduction, label_smoothing", [
    ((1, 1), "mean", 0.0), ((5, 7), "mean", 0.0), ((5, 7), "sum", 0.25), ((5, 7), "none", 0.25),
    ((2, 3, 4, 5), "mean", 0.25), ((2, 3, 4, 5), "none", 0.0), ((4,), "mean", 0.0), ((4,), "none", 0.25),
], ids=str)  # fmt: skip
def test_cross_entropy_with_class_indices(shape, reduction, label_smoothing):
    inputs = [_uniform(shape), _classes(_index_shape(shape), shape[_class_dim(shape)])]
    kwargs = {"reduction": reduction, "label_smoothing": label_smoothing}
    check_op([], lambda x, t: F.cross_entropy(x, t.long(), **kwargs), lambda x, t: x.cross_entropy(t, **kwargs),
             inputs=inputs, **LOOSE)  # fmt: skip


@pytest.mark.parametrize("shape, reduction, ignore_index, layout", [
    ((5, 7), "mean", -100, C), ((5, 7), "sum", -100, C), ((5, 7), "none", 2, C), ((2, 3, 4, 5), "mean", 2, C),
    ((5, 7), "mean", 2, T), ((2, 3, 4, 5), "sum", -100, S),
], ids=str)  # fmt: skip
def test_cross_entropy_with_weight_ignore_index_and_smoothing(shape, reduction, ignore_index, layout):
    c, index_shape = shape[1], _index_shape(shape)
    target = _classes(index_shape, c, ignore=_some_ignored(index_shape), ignore_index=ignore_index)
    kwargs = {"reduction": reduction, "ignore_index": ignore_index, "label_smoothing": 0.1}
    check_op([], lambda x, t, w: F.cross_entropy(x, t.long(), w.detach(), **kwargs),
             lambda x, t, w: x.cross_entropy(t, w, **kwargs), inputs=[_uniform(shape), target, _positive((c,))],
             layout=layout, **LOOSE)  # fmt: skip


def test_cross_entropy_accepts_int64_targets_and_tinygrads_Y():
    x, t = _uniform((6, 4)), _classes((6,), 4).astype(np.int64)
    check_op([], lambda x, t: F.cross_entropy(x, t), lambda x, t: x.cross_entropy(Y=t), inputs=[x, t], **LOOSE)


def test_cross_entropy_where_every_target_is_ignored_is_nan_like_torch():
    x, t = _uniform((3, 4)), np.full(3, -100, np.int32)
    check_op([], lambda x, t: F.cross_entropy(x, t.long()), lambda x, t: x.cross_entropy(t), inputs=[x, t], grad=False)


@pytest.mark.parametrize("shape, reduction, label_smoothing", [
    ((1, 1), "mean", 0.0), ((5, 7), "mean", 0.0), ((5, 7), "sum", 0.2), ((2, 3, 4, 5), "none", 0.0),
    ((4,), "mean", 0.2),
], ids=str)  # fmt: skip
def test_cross_entropy_with_class_probabilities(shape, reduction, label_smoothing):
    probs = np.exp(_uniform(shape, seed=1))
    probs = (probs / probs.sum(_class_dim(shape), keepdims=True)).astype(np.float32)
    kwargs = {"reduction": reduction, "label_smoothing": label_smoothing}
    check_op([], lambda x, p, w: F.cross_entropy(x, p, w.detach(), **kwargs),
             lambda x, p, w: x.cross_entropy(p, w, **kwargs),
             inputs=[_uniform(shape), probs, _positive((shape[_class_dim(shape)],))], **LOOSE)  # fmt: skip


def test_cross_entropy_is_stable_for_large_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-500.0, 500.0, 499.0]], np.float32)
    check_op([], lambda x, t: F.cross_entropy(x, t.long()), lambda x, t: x.cross_entropy(t),
             inputs=[x, np.array([1, 2], np.int32)])  # fmt: skip


def test_cross_entropy_runs_in_few_kernels():
    x = Tensor(_uniform((64, 10)), requires_grad=True).realize()
    t = Tensor(_classes((64,), 10)).realize()
    GlobalCounters.reset()
    x.cross_entropy(t).realize()
    assert GlobalCounters.kernel_count <= 3, f"cross_entropy forward ran {GlobalCounters.kernel_count} kernels"
    GlobalCounters.reset()
    loss = x.cross_entropy(t, label_smoothing=0.1)
    loss.backward()
    loss.realize(x.grad)
    assert GlobalCounters.kernel_count <= 7, f"cross_entropy forward+backward ran {GlobalCounters.kernel_count} kernels"


# ---- nll_loss and sparse_categorical_crossentropy ----


@pytest.mark.parametrize("shape, reduction, weighted", [
    ((1, 1), "mean", False), ((5, 7), "mean", True), ((5, 7), "sum", False), ((5, 7), "none", True),
    ((2, 3, 4, 5), "mean", True), ((4,), "mean", False),
], ids=str)  # fmt: skip
def test_nll_loss(shape, reduction, weighted):
    c, index_shape = shape[_class_dim(shape)], _index_shape(shape)
    target = _classes(index_shape, c, ignore=_some_ignored(index_shape) if index_shape else None)
    inputs = [_uniform(shape, -4, 0), target, _positive((c,))]
    check_op([], lambda x, t, w: F.nll_loss(x, t.long(), w.detach() if weighted else None, reduction=reduction),
             lambda x, t, w: x.nll_loss(t, w if weighted else None, reduction=reduction), inputs=inputs,
             **LOOSE)  # fmt: skip


@pytest.mark.parametrize("layout", [C, T])
def test_nll_loss_ignore_index_inside_the_class_range(layout):
    target = _classes((6,), 4)
    target[[1, 4]] = 0
    check_op([], lambda x, t: F.nll_loss(x, t.long(), ignore_index=0), lambda x, t: x.nll_loss(t, ignore_index=0),
             inputs=[_uniform((6, 4)), target], layout=layout)  # fmt: skip


@pytest.mark.parametrize("shape, reduction, label_smoothing", [
    ((1, 1), "mean", 0.0), ((6, 5), "mean", 0.3), ((6, 5), "sum", 0.0), ((2, 3, 4), "none", 0.3),
    ((2, 3, 4), "mean", 0.0),
], ids=str)  # fmt: skip
def test_sparse_categorical_crossentropy_matches_cross_entropy_with_classes_last(shape, reduction, label_smoothing):
    index_shape, c = shape[:-1], shape[-1]
    target = _classes(index_shape, c, ignore=_some_ignored(index_shape), ignore_index=-1)

    def reference(x, t):
        loss = F.cross_entropy(x.reshape(-1, c), t.long().flatten(), ignore_index=-1, reduction=reduction,
                               label_smoothing=label_smoothing)  # fmt: skip
        return loss.reshape(index_shape) if reduction == "none" else loss

    check_op([], reference, lambda x, t: x.sparse_categorical_crossentropy(t, label_smoothing=label_smoothing,
             reduction=reduction), inputs=[_uniform(shape), target], **LOOSE)  # fmt: skip


def test_sparse_categorical_crossentropy_accepts_float_labels():
    labels = _classes((5,), 3)
    check_op([(5, 3)], lambda x: F.cross_entropy(x, torch.tensor(labels).long()),
             lambda x: x.sparse_categorical_crossentropy(Tensor(labels.astype(np.float32))), **LOOSE)  # fmt: skip


def test_sparse_categorical_crossentropy_with_labels_that_require_grad():
    x, y = _uniform((5, 3)), _classes((5,), 3)
    check_op([], lambda x, y: F.cross_entropy(x, y.long()), lambda x, y: x.sparse_categorical_crossentropy(y),
             inputs=[x, y.astype(np.float32)], **LOOSE)  # fmt: skip


# ---- binary cross entropy ----


@pytest.mark.parametrize("shape, reduction, layout", [
    ((1,), "mean", C), ((4, 3), "sum", C), ((2, 3, 5), "none", C), ((4, 3), "mean", T), ((2, 3, 5), "mean", S),
    ((4, 3), "sum", T), ((2, 3, 5), "none", S),
], ids=str)  # fmt: skip
def test_binary_crossentropy(shape, reduction, layout):
    check_op([shape, shape], lambda x, y: F.binary_cross_entropy(x, y, reduction=reduction),
             lambda x, y: x.binary_crossentropy(y, reduction=reduction), low=0.05, high=0.95, layout=layout,
             **LOOSE)  # fmt: skip


def test_binary_crossentropy_with_weight_and_saturated_inputs():
    x = np.array([[0.0, 1.0, 0.5], [1e-30, 0.999, 0.2]], np.float32)
    y = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.3]], np.float32)
    check_op([], lambda x, y, w: F.binary_cross_entropy(x, y, w.detach()), lambda x, y, w: x.binary_crossentropy(y, w),
             inputs=[x, y, _positive((3,))], grad=False)  # fmt: skip
    check_op([(4, 3), (4, 3), (3,)], lambda x, y, w: F.binary_cross_entropy(x, y, w.detach(), reduction="sum"),
             lambda x, y, w: x.binary_cross_entropy(y, w, reduction="sum"), low=0.1, high=0.9, **LOOSE)  # fmt: skip


@pytest.mark.parametrize("shape, reduction, layout", [
    ((1,), "mean", C), ((4, 3), "sum", C), ((2, 3, 5), "none", C), ((4, 3), "mean", T), ((2, 3, 5), "mean", S),
    ((4, 3), "sum", T), ((2, 3, 5), "none", S),
], ids=str)  # fmt: skip
def test_binary_crossentropy_logits(shape, reduction, layout):
    inputs = [_uniform(shape, -4, 4), _uniform(shape, 0, 1, seed=1)]
    check_op([], lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction),
             lambda x, y: x.binary_crossentropy_logits(y, reduction=reduction), inputs=inputs, layout=layout,
             **LOOSE)  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy_logits_with_weight_and_pos_weight(reduction):
    inputs = [_uniform((4, 3), -4, 4), _uniform((4, 3), 0, 1, seed=1), _positive((3,)), _positive((3,), seed=6)]
    check_op([], lambda x, y, w, p: F.binary_cross_entropy_with_logits(x, y, w.detach(), reduction=reduction,
                                                                       pos_weight=p.detach()),
             lambda x, y, w, p: x.binary_crossentropy_logits(y, w, reduction, pos_weight=p), inputs=inputs,
             **LOOSE)  # fmt: skip


def test_binary_cross_entropy_with_logits_torch_name_and_pos_weight_alone():
    inputs = [_uniform((4, 3), -4, 4), _uniform((4, 3), 0, 1, seed=1), _positive((3,), seed=6)]
    check_op([], lambda x, y, p: F.binary_cross_entropy_with_logits(x, y, pos_weight=p.detach()),
             lambda x, y, p: x.binary_cross_entropy_with_logits(y, pos_weight=p), inputs=inputs, **LOOSE)  # fmt: skip


def test_binary_crossentropy_logits_is_stable_for_large_logits():
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0], np.float32)
    y = np.array([1.0, 0.0, 0.5, 1.0, 0.0], np.float32)
    check_op([], lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
             lambda x, y: x.binary_crossentropy_logits(Y=y, reduction="none"), inputs=[x, y])  # fmt: skip


# ---- mse_loss, l1_loss, smooth_l1_loss, huber_loss ----

ELEMENTWISE_LOSSES = {"mse_loss": [{}], "l1_loss": [{}], "smooth_l1_loss": [{"beta": 1.0}, {"beta": 0.5}],
                      "huber_loss": [{"delta": 1.0}, {"delta": 0.7}]}  # fmt: skip


@pytest.mark.parametrize("shape, reduction, layout", [((1,), "mean", C), ((2, 3, 4), "none", C), ((3, 5), "mean", T),
                                                      ((2, 3, 4), "sum", S)], ids=str)  # fmt: skip
@pytest.mark.parametrize("name", ELEMENTWISE_LOSSES)
def test_elementwise_loss(name, shape, reduction, layout):
    for kwargs in ELEMENTWISE_LOSSES[name]:
        check_op([shape, shape], lambda x, y, kw=kwargs: getattr(F, name)(x, y, reduction=reduction, **kw),
                 lambda x, y, kw=kwargs: getattr(x, name)(y, reduction=reduction, **kw), layout=layout,
                 **LOOSE)  # fmt: skip


@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("name", ELEMENTWISE_LOSSES)
def test_elementwise_loss_broadcasts_target(name):
    check_op([(3, 1), (4,)], lambda x, y: getattr(F, name)(x, y, reduction="none"),
             lambda x, y: getattr(x, name)(y, reduction="none"), **LOOSE)  # fmt: skip


@pytest.mark.parametrize("name, reduction", [("mse_loss", "mean"), ("l1_loss", "mean"), ("huber_loss", "mean"),
                                             ("mse_loss", "sum")])  # fmt: skip
def test_elementwise_loss_with_weight(name, reduction):
    inputs = [_uniform((3, 4)), _uniform((3, 4), seed=1), _positive((3, 4))]
    check_op([], lambda x, y, w: getattr(F, name)(x, y, reduction=reduction, weight=w),
             lambda x, y, w: getattr(x, name)(y, reduction=reduction, weight=w), inputs=inputs, **LOOSE)  # fmt: skip


def test_smooth_l1_loss_with_zero_beta_is_l1():
    check_op([(3, 4), (3, 4)], lambda x, y: F.smooth_l1_loss(x, y, beta=0.0),
             lambda x, y: x.smooth_l1_loss(y, beta=0.0))  # fmt: skip


def test_l1_loss_gradient_at_zero_difference_is_zero():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    check_op([], F.l1_loss, lambda x, y: x.l1_loss(y), inputs=[x, x.copy()])


# ---- the PYTHON device: a smaller set on tiny shapes ----


@pytest.mark.parametrize("shapes, torch_fn, ours", [
    ([(2, 3), (3,), (3,)], lambda x, w, b: F.layer_norm(x, (3,), w, b), lambda x, w, b: x.layer_norm(3, w, b)),
    ([(2, 4, 2)], lambda x: F.group_norm(x, 2), lambda x: x.group_norm(2)),
    ([(3, 2)], lambda x: F.rms_norm(x, (2,)), lambda x: x.rms_norm(2)),
    ([(3, 2)], lambda x: F.batch_norm(x, None, None, training=True), lambda x: x.batch_norm(None, None, training=True)),
    ([(2, 3), (4, 3), (4, 2)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True)),
    ([(2, 3), (2, 3)], F.binary_cross_entropy_with_logits, lambda x, y: x.binary_crossentropy_logits(y)),
    ([(2, 3), (2, 3)], F.smooth_l1_loss, lambda x, y: x.smooth_l1_loss(y)),
], ids=["layer_norm", "group_norm", "rms_norm", "batch_norm", "sdpa_causal", "bce_logits", "smooth_l1"])  # fmt: skip
def test_on_python_device(shapes, torch_fn, ours):
    check_op(shapes, torch_fn, ours, device="PYTHON", **LOOSE)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_on_python_device(label_smoothing):
    inputs = [_uniform((3, 4)), np.array([0, -100, 3], np.int32)]
    check_op([], lambda x, t: F.cross_entropy(x, t.long(), label_smoothing=label_smoothing),
             lambda x, t: x.cross_entropy(t, label_smoothing=label_smoothing), inputs=inputs, device="PYTHON",
             **LOOSE)  # fmt: skip


# ---- bad input: each error names the op, what it got and what it needs ----


def _t(*shape, dtype=dtypes.float32):
    return Tensor(np.zeros(shape, np.float32)).cast(dtype)


BAD_CALLS = [
    (lambda: _t(3, 4).layer_norm((3,)), ValueError, r"layer_norm: normalized_shape \(3,\) must be the last"),
    (lambda: _t(3, 4).layer_norm(4, weight=_t(3)), ValueError, r"layer_norm: weight has shape \(3,\) .* needs \(4,\)"),
    (lambda: _t(3, 4).layernorm(axis=2), IndexError, r"layernorm: dimension 2 is out of range"),
    (lambda: _t(3, 4).rms_norm((2, 3, 4)), ValueError, r"rms_norm: normalized_shape \(2, 3, 4\)"),
    (lambda: _t(2, 6, 3).group_norm(4), ValueError, r"group_norm: num_groups=4 .* divides the 6 channels"),
    (lambda: _t(6).group_norm(2), ValueError, r"group_norm: input needs shape \(N, C, \*\), got \(6,\)"),
    (lambda: _t(2, 6).group_norm(3, bias=_t(3)), ValueError, r"group_norm: bias has shape \(3,\)"),
    (lambda: _t(2, 3).batch_norm(_t(3), None), ValueError, r"batch_norm: running_mean and running_var are required"),
    (lambda: _t(2, 3).batch_norm(_t(4), _t(4)), ValueError, r"batch_norm: running_mean has shape \(4,\) .* \(3,\)"),
    (lambda: _t(2, 3).batch_norm(None, None, _t(2), training=True), ValueError, r"batch_norm: weight has shape \(2,\)"),
    (lambda: _t(2, 3, 4).instance_norm(bias=_t(4)), ValueError, r"instance_norm: bias has shape \(4,\) .* \(3,\)"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 4), _t(5, 2), dropout_p=1.5), ValueError,
     r"scaled_dot_product_attention: dropout_p must be a probability in \[0, 1\], got 1.5"),
    (lambda: _t(1, 3).batch_norm(None, None, training=True), ValueError, r"batch_norm: expected more than 1 value"),
    (lambda: _t(3).batch_norm(None, None, training=True), ValueError, r"batch_norm: input needs shape \(N, C, \*\)"),
    (lambda: _t(2, 3, 1).instance_norm(), ValueError, r"instance_norm: expected more than 1 spatial element"),
    (lambda: _t(2, 3).batchnorm(None, None, _t(2), _t(3)), ValueError, r"batchnorm: mean has shape \(2,\)"),
    (lambda: _t(2, 3).batchnorm(None, None, None, _t(3)), ValueError, r"batchnorm: mean and invstd are required"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 3), _t(5, 2)), ValueError,
     r"scaled_dot_product_attention: query \(3, 4\) and key \(5, 3\) differ in their last dimension"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 4), _t(6, 2)), ValueError,
     r"scaled_dot_product_attention: key \(5, 4\) and value \(6, 2\) differ in length"),
    (lambda: _t(4).scaled_dot_product_attention(_t(5, 4), _t(5, 2)), ValueError,
     r"scaled_dot_product_attention: query needs shape \(\.\.\., length, features\), got \(4,\)"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 4), _t(5, 2), attn_mask=_t(3, 4)), ValueError,
     r"scaled_dot_product_attention: attn_mask: shapes \(3, 4\) and \(3, 5\) cannot broadcast"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 4), _t(5, 2), attn_mask=_t(3, 5, dtype=dtypes.int32)),
     TypeError, r"scaled_dot_product_attention: attn_mask must be bool .* got dtypes.int"),
    (lambda: _t(3, 4).scaled_dot_product_attention(_t(5, 4), _t(5, 2), attn_mask=_t(3, 5), is_causal=True),
     ValueError, r"scaled_dot_product_attention: pass attn_mask or is_causal=True, not both"),
    (lambda: _t(3, 2, 4).scaled_dot_product_attention(_t(2, 5, 4), _t(2, 5, 2), enable_gqa=True), ValueError,
     r"scaled_dot_product_attention: enable_gqa needs heads"),
    (lambda: _t(3, 4).cross_entropy(_t(4, dtype=dtypes.int32)), ValueError,
     r"cross_entropy: target has shape \(4,\) but input \(3, 4\) needs class indices of shape \(3,\)"),
    (lambda: _t(3, 4).cross_entropy(_t(3)), RuntimeError, r"cross_entropy: class-index targets must be an integer"),
    (lambda: _t(3, 4).cross_entropy(_t(3, dtype=dtypes.int32), reduction="avg"), ValueError,
     r"cross_entropy: reduction must be one of \('mean', 'sum', 'none'\), got 'avg'"),
    (lambda: _t(3, 4).cross_entropy(_t(3, dtype=dtypes.int32), label_smoothing=1.5), ValueError,
     r"cross_entropy: label_smoothing must be between 0 and 1, got 1.5"),
    (lambda: _t(3, 4).cross_entropy(_t(3, dtype=dtypes.int32), weight=_t(3)), ValueError,
     r"cross_entropy: weight has shape \(3,\) but the input \(3, 4\) needs \(4,\)"),
    (lambda: _t(3, 4).cross_entropy(), TypeError, r"cross_entropy: pass the target once"),
    (lambda: _t(3, 4).cross_entropy(_t(3), Y=_t(3)), TypeError, r"cross_entropy: pass the target once"),
    (lambda: _t().cross_entropy(_t(dtype=dtypes.int32)), ValueError, r"cross_entropy: input needs shape \(C,\)"),
    (lambda: _t(3, 4).nll_loss(_t(3, 1, dtype=dtypes.int32)), ValueError, r"nll_loss: target has shape \(3, 1\)"),
    (lambda: _t(3, 4).sparse_categorical_crossentropy(_t(4)), ValueError,
     r"sparse_categorical_crossentropy: Y has shape \(4,\) but input \(3, 4\) needs class indices of shape \(3,\)"),
    (lambda: _t(3, 4).binary_crossentropy(_t(4)), ValueError,
     r"binary_crossentropy: target has shape \(4,\) but must have the input's shape \(3, 4\)"),
    (lambda: _t(3, 4).binary_crossentropy_logits(_t(3, 4), pos_weight=_t(3)), ValueError,
     r"binary_crossentropy_logits: pos_weight: shapes \(3,\) and \(3, 4\) cannot broadcast"),
    (lambda: _t(3, 4).binary_crossentropy_logits(_t(3, 4), weight=_t(2, 3, 4)), ValueError,
     r"binary_crossentropy_logits: weight of shape \(2, 3, 4\) must broadcast to the input's shape \(3, 4\)"),
    (lambda: _t(3, 4).mse_loss(_t(3, 5)), ValueError, r"mse_loss: shapes \(3, 4\) and \(3, 5\) cannot broadcast"),
    (lambda: _t(3, 4).mse_loss(None), TypeError, r"mse_loss: target must be a tensor, got None"),
    (lambda: _t(3, 4).huber_loss(Tensor(np.zeros((3, 4), np.float32), device="PYTHON")), ValueError,
     r"huber_loss: target is on PYTHON but the input is on"),
    (lambda: _t(3, 4).l1_loss(_t(3, 4), reduction="max"), ValueError, r"l1_loss: reduction must be one of"),
    (lambda: _t(3, 4).mse_loss(_t(3, 4), weight=_t(4)), ValueError,
     r"mse_loss: weight has shape \(4,\) but must have the input's shape \(3, 4\)"),
    (lambda: _t(3).smooth_l1_loss(_t(3), beta=-1.0), ValueError, r"smooth_l1_loss: beta must be non-negative"),
    (lambda: _t(3).huber_loss(_t(3), delta=0.0), ValueError, r"huber_loss: delta must be positive, got 0.0"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, message", BAD_CALLS, ids=[m.split(":")[0] for _, _, m in BAD_CALLS])
def test_bad_input_raises_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_errors_on_other_device():
    x, other = _t(3, 4), Tensor(np.zeros(4, np.float32), device="PYTHON")
    with pytest.raises(ValueError, match=rf"layer_norm: weight is on PYTHON but the input is on {x.device}"):
        x.layer_norm(4, weight=other)


def test_sdpa_without_mask_never_makes_nan():
    q = Tensor(np.full((2, 3), 50.0, np.float32))
    out = q.scaled_dot_product_attention(q, Tensor(np.eye(2, 4, dtype=np.float32)))
    assert not math.isnan(out.sum().item())
