"""Convolution (1d/2d/3d, transposed) and max/avg pooling against PyTorch, forward values and gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from glassgrad import Device, GlobalCounters, Tensor, dtypes
from glassgrad.codegen import get_program
from torch_check import LAYOUTS, check_op

# Sums of up to a few dozen products of values in [-2, 2]: float32 rounding reaches ~1e-5 on results near zero.
SUMS = {"atol": 3e-5, "rtol": 1e-5}


def _upstream(fn):
    """fn's output times fixed random weights: the gradient flowing back is not all ones, which tests more (which
    output went where)"""

    def weighted(*args):
        out = fn(*args)
        w = np.random.default_rng(7).uniform(0.5, 1.5, tuple(out.shape)).astype(np.float32)
        return out * (torch.tensor(w) if isinstance(out, torch.Tensor) else Tensor(w, device=out.device))

    return weighted


def _check_conv(name, shapes, kwargs, **options):
    """torch.nn.functional.<name>(x, weight, [bias], **kwargs) against x.<name>(weight, [bias], **kwargs)."""
    theirs = _upstream(lambda x, *params: getattr(F, name)(x, *params, **kwargs))
    ours = _upstream(lambda x, *params: getattr(x, name)(*params, **kwargs))
    check_op(shapes, theirs, ours, **{**SUMS, **options})


# ---- conv2d ----

CONV2D_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 3), {}),  # odd sizes
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),  # 1-size
    ((1, 2, 4, 4), (3, 2, 1, 1), {}),  # 1x1 kernel
    ((1, 2, 3, 3), (2, 2, 3, 3), {}),  # kernel as large as the input
    ((2, 3, 7, 8), (4, 3, 3, 3), {"padding": 1}),
    ((1, 2, 9, 7), (3, 2, 3, 2), {"stride": 2, "padding": (1, 2)}),
    ((1, 2, 9, 8), (2, 2, 2, 3), {"stride": (3, 1)}),  # stride larger than the kernel: windows skip input
    ((1, 2, 9, 9), (2, 2, 3, 3), {"dilation": 2, "padding": 2}),
    ((1, 2, 8, 9), (2, 2, 2, 3), {"dilation": (3, 1), "stride": (2, 3), "padding": (2, 1)}),
    ((1, 4, 6, 5), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ((2, 3, 5, 5), (6, 1, 3, 3), {"groups": 3}),  # depthwise, two filters per channel
    ((1, 2, 5, 6), (3, 2, 3, 3), {"padding": "same"}),
    ((1, 2, 5, 6), (3, 2, 4, 2), {"padding": "same", "dilation": (1, 3)}),  # even kernel: the extra pad goes after
    ((1, 2, 5, 6), (3, 2, 3, 3), {"padding": "valid"}),
    ((3, 5, 6), (2, 3, 3, 3), {"padding": 1}),  # unbatched (C, H, W)
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("x, weight, kwargs", CONV2D_CASES, ids=str)
def test_conv2d_matches_torch(x, weight, kwargs):
    _check_conv("conv2d", [x, weight], kwargs)


def test_conv_padding_before_and_after_each_dim_is_f_pad_order():
    # (left, right, top, bottom) as F.pad; torch's conv takes no such padding, so it pads first
    check_op([(1, 2, 5, 6), (3, 2, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (1, 0, 2, 1)), w),
             lambda x, w: x.conv2d(w, padding=(1, 0, 2, 1)), **SUMS)  # fmt: skip
    check_op([(3, 7), (2, 3, 4)], lambda x, w: F.conv1d(F.pad(x, (1, 2)), w), lambda x, w: x.conv1d(w, padding=(1, 2)),
             **SUMS)  # fmt: skip


@pytest.mark.parametrize("x, weight, kwargs", [
    ((2, 3, 7, 8), (4, 3, 3, 3), {"padding": 1}),
    ((1, 4, 9, 7), (6, 2, 3, 2), {"stride": 2, "padding": 1, "dilation": (2, 1), "groups": 2}),
    ((3, 5, 6), (2, 3, 3, 3), {}),
])  # fmt: skip
def test_conv2d_with_bias_matches_torch(x, weight, kwargs):
    _check_conv("conv2d", [x, weight, (weight[0],)], kwargs)


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_conv2d_of_non_contiguous_inputs(layout):
    _check_conv("conv2d", [(2, 3, 6, 5), (4, 3, 3, 2), (4,)], {"stride": (1, 2), "padding": 1}, layout=layout)


def test_conv2d_with_many_input_channels_loosens_for_float32_rounding():
    # 64 * 9 = 576 products per output: float32 sums carry about 5x the rounding of the small cases
    _check_conv("conv2d", [(1, 64, 5, 5), (2, 64, 3, 3)], {"padding": 1}, atol=2e-4, rtol=2e-5)


def test_bias_gradient_of_a_plain_sum():
    check_op([(1, 2, 4, 4), (3, 2, 3, 3), (3,)], F.conv2d, lambda x, w, b: x.conv2d(w, b), **SUMS)


# ---- conv1d and conv3d: the same N-d code ----


@pytest.mark.parametrize("shapes, kwargs", [
    ([(2, 3, 10), (5, 3, 3)], {}),
    ([(2, 3, 10), (5, 3, 3), (5,)], {"stride": 3, "padding": 2}),
    ([(1, 4, 9), (4, 2, 2)], {"dilation": 3, "groups": 2, "padding": "same"}),
    ([(1, 1, 1), (1, 1, 1)], {}),
    ([(3, 7), (2, 3, 4)], {"padding": 2}),  # unbatched
])  # fmt: skip
def test_conv1d_matches_torch(shapes, kwargs):
    _check_conv("conv1d", shapes, kwargs)


@pytest.mark.parametrize("shapes, kwargs", [
    ([(1, 2, 4, 5, 3), (2, 2, 2, 3, 2), (2,)], {"padding": 1}),
    ([(2, 2, 5, 4, 4), (2, 1, 3, 1, 2)], {"stride": (2, 1, 2), "dilation": (1, 2, 1), "groups": 2}),
])  # fmt: skip
def test_conv3d_matches_torch(shapes, kwargs):
    _check_conv("conv3d", shapes, kwargs)


# ---- conv_transpose ----


@pytest.mark.parametrize("shapes, kwargs", [
    ([(2, 3, 4, 5), (3, 2, 3, 3)], {}),
    ([(1, 1, 1, 1), (1, 1, 1, 1)], {}),
    ([(2, 4, 5, 4), (4, 3, 3, 2), (6,)], {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ([(1, 2, 4, 4), (2, 3, 3, 3)], {"stride": (1, 2), "padding": (2, 0), "dilation": 2}),
    ([(1, 2, 3, 3), (2, 2, 2, 2)], {"stride": 3, "output_padding": (2, 0)}),  # stride larger than the kernel
    ([(1, 2, 4, 4), (2, 2, 3, 3)], {"padding": 2}),  # padding equal to kernel - 1: no border at all
    ([(2, 3, 3), (2, 2, 2, 3)], {"stride": 2}),  # unbatched
])  # fmt: skip
def test_conv_transpose2d_matches_torch(shapes, kwargs):
    _check_conv("conv_transpose2d", shapes, kwargs)


@pytest.mark.parametrize("name, shapes, kwargs", [
    ("conv_transpose1d", [(2, 3, 6), (3, 2, 3), (2,)], {"stride": 2, "padding": 1, "output_padding": 1}),
    ("conv_transpose3d", [(1, 2, 3, 2, 3), (2, 2, 2, 2, 2)], {"stride": (2, 1, 2), "padding": (0, 1, 0)}),
])  # fmt: skip
def test_conv_transpose1d_and_3d_match_torch(name, shapes, kwargs):
    _check_conv(name, shapes, kwargs)


def test_conv_transpose2d_of_non_contiguous_inputs():
    _check_conv("conv_transpose2d", [(2, 3, 4, 5), (3, 2, 3, 3), (2,)], {"stride": 2}, layout="transposed")


# ---- max_pool and avg_pool ----

POOL2D_CASES = [
    ((2, 3, 6, 8), {"kernel_size": 2}),  # stride defaults to the kernel
    ((1, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 7, 8), {"kernel_size": (3, 2), "stride": (1, 2)}),
    ((1, 2, 5, 7), {"kernel_size": 2, "stride": 3}),  # stride larger than the kernel
    ((1, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 6, 6), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),  # the last window starts inside the input
    ((1, 2, 5, 5), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),  # ...but not past the padding
    ((3, 7, 6), {"kernel_size": 2}),  # unbatched (C, H, W)
]


@pytest.mark.parametrize("x, kwargs", [*POOL2D_CASES, ((1, 1, 1, 1), {"kernel_size": 1})], ids=str)
def test_max_pool2d_matches_torch(x, kwargs):
    check_op([x], lambda t: F.max_pool2d(t, **kwargs), lambda t: t.max_pool2d(**kwargs))


@pytest.mark.parametrize("x, kwargs", [*POOL2D_CASES, ((1, 1, 1, 1), {"kernel_size": 1})], ids=str)
def test_avg_pool2d_matches_torch(x, kwargs):
    check_op([x], lambda t: F.avg_pool2d(t, **kwargs), lambda t: t.avg_pool2d(**kwargs))


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 3, "stride": 1, "dilation": 2},
    {"kernel_size": (2, 3), "stride": 2, "padding": 1, "dilation": (3, 1), "ceil_mode": True},
])  # fmt: skip
def test_max_pool2d_with_dilation_matches_torch(kwargs):
    check_op([(1, 2, 9, 8)], lambda t: F.max_pool2d(t, **kwargs), lambda t: t.max_pool2d(**kwargs))


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": True},
    {"kernel_size": 2, "padding": 1, "divisor_override": 3},
])  # fmt: skip
def test_avg_pool2d_divisors_match_torch(kwargs):
    check_op([(1, 2, 7, 8)], lambda t: F.avg_pool2d(t, **kwargs), lambda t: t.avg_pool2d(**kwargs))


def test_max_pool2d_gradient_goes_to_the_first_of_tied_maxima():
    # whole numbers from {0, 1, 2} tie in most windows; overlapping windows and padding too
    x = np.random.default_rng(3).integers(0, 3, (2, 2, 7, 7)).astype(np.float32)
    check_op([x.shape], lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: t.max_pool2d(3, 2, 1), inputs=[x])
    relu_like = np.maximum(x - 1.5, 0)  # all-zero windows, as after a ReLU
    check_op([x.shape], lambda t: F.max_pool2d(t, 2), lambda t: t.max_pool2d(2), inputs=[relu_like])


def test_max_pool2d_propagates_nan():
    x = np.random.default_rng(3).uniform(-1, 1, (1, 1, 4, 4)).astype(np.float32)
    x[0, 0, 1, 2] = np.nan
    check_op([x.shape], lambda t: F.max_pool2d(t, 2), lambda t: t.max_pool2d(2), inputs=[x], grad=False)
    expected = F.max_pool2d(torch.tensor(x), 2).numpy()
    np.testing.assert_array_equal(Tensor(x).max_pool2d(2).numpy(), expected)  # without requires_grad: a plain max


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2},
                                    {"kernel_size": (2, 3), "ceil_mode": True}])  # fmt: skip
def test_max_pool2d_return_indices_matches_torch(kwargs):
    x = np.random.default_rng(3).integers(0, 4, (2, 2, 7, 8)).astype(np.float32)  # ties pick the first
    values, indices = Tensor(x).max_pool2d(**kwargs, return_indices=True)
    expected_values, expected_indices = F.max_pool2d(torch.tensor(x), **kwargs, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), expected_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())
    assert indices.dtype == dtypes.default_int  # int32 as tinygrad's (test_tinygrad_forms: int64 as PyTorch's)


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_pools_of_non_contiguous_inputs(layout):
    kwargs = {"kernel_size": 3, "stride": 2, "padding": 1}
    check_op([(2, 3, 7, 6)], lambda t: F.max_pool2d(t, **kwargs), lambda t: t.max_pool2d(**kwargs), layout=layout)
    check_op([(2, 3, 7, 6)], lambda t: F.avg_pool2d(t, **kwargs), lambda t: t.avg_pool2d(**kwargs), layout=layout)


@pytest.mark.parametrize("name, x, kwargs", [
    ("max_pool1d", (2, 3, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True}),
    ("avg_pool1d", (2, 3, 9), {"kernel_size": 4, "stride": 3, "padding": 2, "count_include_pad": False}),
    ("avg_pool1d", (3, 5), {"kernel_size": 2}),
    ("max_pool3d", (1, 2, 4, 5, 4), {"kernel_size": 2, "stride": (1, 2, 2), "padding": 1}),
    ("avg_pool3d", (1, 2, 4, 5, 4), {"kernel_size": (2, 3, 2), "ceil_mode": True}),
])  # fmt: skip
def test_1d_and_3d_pools_match_torch(name, x, kwargs):
    check_op([x], lambda t: getattr(F, name)(t, **kwargs), lambda t: getattr(t, name)(**kwargs))


# ---- fusion and generated code ----


def _kernel_sources(t: Tensor) -> list[str]:
    return [get_program(item.ast, Device["CPU"].renderer).src for item in t.schedule() if item.ast.op.name == "SINK"]


def test_conv2d_kernels_index_without_division():
    """The convolution, and on the CPU the padded input and the packed weight it reads (schedule/conv.py)."""
    x, w, b = Tensor.rand(2, 3, 9, 8).realize(), Tensor.rand(4, 3, 3, 3).realize(), Tensor.rand(4).realize()
    for kwargs in ({"padding": 1}, {"stride": 2, "dilation": (1, 2), "padding": (2, 1)}):
        for src in _kernel_sources(x.conv2d(w, b, **kwargs)):
            assert "/" not in src and "%" not in src, src


def test_max_pool2d_without_gradients_is_one_kernel():
    x = Tensor.rand(2, 3, 8, 8).realize()
    GlobalCounters.reset()
    x.max_pool2d(3, 2, 1).realize()
    assert GlobalCounters.kernel_count == 1


# ---- the PYTHON device ----


def test_conv_and_pools_on_python_device():
    _check_conv("conv2d", [(1, 2, 4, 3), (2, 2, 2, 2), (2,)], {"padding": 1, "stride": (2, 1)}, device="PYTHON")
    _check_conv("conv_transpose2d", [(1, 2, 2, 2), (2, 1, 2, 2)], {"stride": 2}, device="PYTHON")
    check_op([(1, 1, 4, 5)], lambda t: F.max_pool2d(t, 2, 1, 1), lambda t: t.max_pool2d(2, 1, 1), device="PYTHON")
    check_op([(1, 1, 5, 4)], lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
             lambda t: t.avg_pool2d(3, 2, 1, ceil_mode=True), device="PYTHON")  # fmt: skip


def test_conv2d_and_pools_of_an_empty_batch():
    _check_conv("conv2d", [(0, 2, 4, 4), (3, 2, 3, 3), (3,)], {})
    check_op([(0, 2, 4, 4)], lambda t: F.max_pool2d(t, 2), lambda t: t.max_pool2d(2))
    check_op([(0, 2, 4, 4)], lambda t: F.avg_pool2d(t, 2), lambda t: t.avg_pool2d(2))


# ---- errors ----


@pytest.mark.parametrize("x, w, kwargs, message", [
    ((1, 3, 5, 5), (2, 4, 3, 3), {}, r"conv2d: input has 3 channels but weight expects 4 \(groups=1\)"),
    ((1, 4, 5, 5), (2, 1, 3, 3), {"groups": 2}, r"conv2d: input has 4 channels but weight expects 2 \(groups=2\)"),
    ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, "conv2d: weight has 3 output channels, which groups=2 does not"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"groups": 0}, "conv2d: groups must be a positive int, got 0"),
    ((4, 5), (2, 4, 3, 3), {}, r"conv2d: input must be \(N, C, H, W\) or \(C, H, W\), got shape \(4, 5\)"),
    ((1, 4, 5, 5), (2, 4, 3), {}, r"conv2d: input must be \(N, C, L\) or \(C, L\), got shape \(1, 4, 5, 5\)"),
    ((1, 4, 5, 5), (2, 4), {}, r"conv2d: weight must be \(out_channels, in_channels / groups, kH, kW\)"),
    ((1, 4, 2, 5), (2, 4, 3, 3), {}, r"conv2d: the padded input \(2, 5\) is smaller than the \(dilated\) kernel"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"dilation": 3}, r"smaller than the \(dilated\) kernel \(7, 7\)"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"stride": 0}, r"conv2d: stride must be an int or a tuple of 2 ints, each at least 1"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"stride": (1, 1, 1)}, "conv2d: stride must be an int or a tuple of 2 ints"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"padding": "full"}, "conv2d: padding must be an int, a tuple, 'same' or 'valid'"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"padding": (1, 2, 3)}, r"conv2d: padding must be an int or a tuple of 2 \(one"),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"padding": "same", "stride": 2}, "conv2d: padding='same' needs stride 1"),
    ((1, 4, 5), (2, 4, 3, 3), {}, r"conv1d: weight must be \(out_channels, in_channels / groups, kL\)"),
])  # fmt: skip
def test_conv_rejects_bad_arguments(x, w, kwargs, message):
    op = "conv1d" if "conv1d" in message else "conv2d"
    with pytest.raises(ValueError, match=message):
        getattr(Tensor.ones(*x), op)(Tensor.ones(*w), **kwargs)


def test_conv_rejects_a_bias_of_the_wrong_shape_and_another_device():
    with pytest.raises(ValueError, match=r"conv2d: bias must have shape \(2,\), one per output channel, got \(3,\)"):
        Tensor.ones(1, 4, 5, 5).conv2d(Tensor.ones(2, 4, 3, 3), Tensor.ones(3))
    with pytest.raises(ValueError, match="conv2d: weight is on PYTHON but the input is on CPU"):
        Tensor.ones(1, 4, 5, 5, device="CPU").conv2d(Tensor.ones(2, 4, 3, 3, device="PYTHON"))
    with pytest.raises(ValueError, match="conv2d: bias is on PYTHON but the input is on CPU"):
        Tensor.ones(1, 4, 5, 5, device="CPU").conv2d(Tensor.ones(2, 4, 3, 3), Tensor.ones(2, device="PYTHON"))
    with pytest.raises(TypeError, match="conv2d: weight must be a tensor, got None"):  # torch: a TypeError too
        Tensor.ones(1, 4, 5, 5).conv2d(None)


@pytest.mark.parametrize("x, w, kwargs, message", [
    ((1, 3, 4, 4), (4, 2, 3, 3), {}, r"conv_transpose2d: input has 3 channels but weight expects 4"),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"groups": 2}, "conv_transpose2d: the input's 3 channels are not divisible by gr"),
    ((1, 4, 4, 4), (4, 2, 3, 3), {"stride": 2, "output_padding": 2}, "output_padding \\(2, 2\\) must be smaller than"),
    ((1, 4, 1, 1), (4, 2, 1, 1), {"padding": 1}, r"conv_transpose2d: the output size \(-1, -1\) is not positive"),
    ((1, 4, 4, 4), (4, 2, 3, 3), {"padding": "same"}, "conv_transpose2d: padding must be an int or a tuple of 2"),
])  # fmt: skip
def test_conv_transpose_rejects_bad_arguments(x, w, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Tensor.ones(*x).conv_transpose2d(Tensor.ones(*w), **kwargs)


@pytest.mark.parametrize("name, x, kwargs, message", [
    ("max_pool2d", (1, 1, 5, 5), {"kernel_size": 2, "padding": 2}, r"padding 2 must be at most half of the"),
    ("avg_pool2d", (1, 1, 2, 5), {"kernel_size": 3}, r"the input's spatial size \(2, 5\) with padding 0 is smaller"),
    ("max_pool2d", (1, 1, 5, 5), {"kernel_size": 0}, "max_pool2d: kernel_size must be an int or a tuple of 2 ints"),
    ("max_pool2d", (5, 5), {"kernel_size": 2}, r"max_pool2d: input must be \(N, C, H, W\) or \(C, H, W\)"),
    ("avg_pool1d", (1, 1, 5), {"kernel_size": 2, "divisor_override": 0}, "divisor_override must be a positive int"),
])  # fmt: skip
def test_pools_reject_bad_arguments(name, x, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(Tensor.ones(*x), name)(**kwargs)
