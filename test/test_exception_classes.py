"""Bad calls raise the exception class PyTorch raises (glassgrad.errors: each class is PyTorch's and glassgrad's own
at once, so `except RuntimeError` works as with PyTorch and `except ValueError` as before)."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from glassgrad import Tensor, dtypes
from glassgrad.errors import ArgumentError, DtypeError, EmptyReductionError


def ones(lib, *shape, dtype=None):
    """A tensor of ones in `lib` (torch or glassgrad's Tensor); dtype is 'bool', 'int' or None (float32)."""
    if lib is torch:
        return torch.ones(shape, dtype={None: torch.float32, "bool": torch.bool, "int": torch.int64}[dtype])
    return Tensor.ones(*shape, dtype={None: dtypes.float32, "bool": dtypes.bool, "int": dtypes.int32}[dtype])


def tensor(lib, values):
    return torch.tensor(values) if lib is torch else Tensor(values)


def both(torch_fn, ours):
    """A call that is spelled differently: lib -> torch_fn(lib) for torch, ours(lib) for glassgrad."""
    return lambda lib: torch_fn(lib) if lib is torch else ours(lib)


def fn(torch_name, method=None):
    """torch.nn.functional's function, or the glassgrad method of the same (or another) name on the first tensor."""
    return lambda lib, x, *args, **kwargs: (getattr(F, torch_name)(x, *args, **kwargs) if lib is torch else
                                            getattr(x, method or torch_name)(*args, **kwargs))  # fmt: skip


def cat(lib, *args, **kwargs):
    return (torch.cat if lib is torch else Tensor.cat)(*args, **kwargs)


def stack(lib, *args, **kwargs):
    return (torch.stack if lib is torch else Tensor.stack)(*args, **kwargs)


def einsum(lib, *args):
    return (torch.einsum if lib is torch else Tensor.einsum)(*args)


BAD_CALLS = {
    # movement
    "permute repeats a dim": lambda L: ones(L, 2, 3).permute(0, 0),
    "permute too few dims": lambda L: ones(L, 2, 3).permute(0),
    "permute dim out of range": lambda L: ones(L, 2, 3).permute(0, 2),
    "reshape to another count": lambda L: ones(L, 2, 3).reshape(4, 2),
    "reshape two -1": lambda L: ones(L, 2, 3).reshape(-1, -1),
    "reshape negative": lambda L: ones(L, 2, 3).reshape(-2, 3),
    "view to another count": lambda L: ones(L, 2, 3).view(5),
    "expand a dim that is not 1": lambda L: ones(L, 2, 3).expand(4, 3),
    "expand to fewer dims": lambda L: ones(L, 2, 3).expand(3),
    "flip dim out of range": lambda L: ones(L, 2, 3).flip(2),
    "flip repeats a dim": lambda L: ones(L, 2, 3).flip((0, 0)),
    "transpose dim out of range": lambda L: ones(L, 2, 3).transpose(0, 2),
    "squeeze dim out of range": lambda L: ones(L, 2, 3).squeeze(3),
    "unsqueeze dim out of range": lambda L: ones(L, 2, 3).unsqueeze(4),
    "flatten dim out of range": lambda L: ones(L, 2, 3).flatten(0, 5),
    "unflatten to another count": lambda L: ones(L, 4, 6).unflatten(1, (4, 2)),
    "t of 3-d": lambda L: ones(L, 2, 3, 4).t(),
    "repeat fewer dims": lambda L: ones(L, 2, 3).repeat(2),
    "roll shifts and dims differ": lambda L: ones(L, 2, 3).roll((1, 2), (0,)),
    "roll dim out of range": lambda L: ones(L, 2, 3).roll(1, 2),
    "unfold bigger than the dim": lambda L: ones(L, 5).unfold(0, 6, 1),
    "unfold dim out of range": lambda L: ones(L, 5).unfold(1, 2, 1),
    "diagonal of one dim twice": lambda L: ones(L, 2, 3).diagonal(0, 0, 0),
    "diagonal dim out of range": lambda L: ones(L, 2, 3).diagonal(0, 0, 2),
    "triu of 1-d": lambda L: ones(L, 3).triu(),
    "pad too many": lambda L: fn("pad")(L, ones(L, 2, 3), (1, 1, 1, 1, 1, 1)),
    "pad odd length": lambda L: fn("pad")(L, ones(L, 2, 3), (1, 1, 1)),
    "reflect pad bigger than the dim": lambda L: fn("pad")(L, ones(L, 1, 2, 3), (3, 3), mode="reflect"),
    # joining and splitting
    "cat of other sizes": lambda L: cat(L, [ones(L, 2, 3), ones(L, 2, 4)]),
    "cat dim out of range": lambda L: cat(L, [ones(L, 2, 3), ones(L, 2, 3)], dim=2),
    "cat of other ranks": lambda L: cat(L, [ones(L, 2, 3), ones(L, 3)]),
    "cat of nothing": lambda L: cat(L, []),
    "stack of other shapes": lambda L: stack(L, [ones(L, 2, 3), ones(L, 2, 4)]),
    "stack dim out of range": lambda L: stack(L, [ones(L, 2, 3), ones(L, 2, 3)], dim=4),
    "stack of nothing": lambda L: stack(L, []),
    "split dim out of range": lambda L: ones(L, 2, 3).split(1, dim=3),
    "split sizes that do not add up": lambda L: ones(L, 5).split([2, 2]),
    "split size 0": lambda L: ones(L, 2, 3).split(0),
    "chunk into 0": lambda L: ones(L, 2, 3).chunk(0),
    "chunk dim out of range": lambda L: ones(L, 2, 3).chunk(2, 2),
    # indexing
    "index out of range": lambda L: ones(L, 2, 3)[2],
    "negative index out of range": lambda L: ones(L, 2, 3)[:, -4],
    "too many indices": lambda L: ones(L, 2, 3)[0, 0, 0],
    "index by a float": lambda L: ones(L, 2, 3)[1.5],
    "index list out of range": lambda L: ones(L, 2, 3)[[0, 5]],
    "gather of another rank": lambda L: ones(L, 2, 3).gather(0, tensor(L, [0, 1])),
    "gather dim out of range": lambda L: ones(L, 2, 3).gather(2, tensor(L, [[0]])),
    "gather by a float index": lambda L: ones(L, 2, 3).gather(0, ones(L, 1, 1)),
    "scatter of another rank": lambda L: ones(L, 2, 3).scatter(0, tensor(L, [0]), ones(L, 1)),
    "scatter_reduce of an unknown reduce": lambda L: ones(L, 3).scatter_reduce(0, tensor(L, [0]), ones(L, 1), "foo"),
    "index_select by a 2-d index": lambda L: ones(L, 2, 3).index_select(0, tensor(L, [[0]])),
    "index_select by a float index": lambda L: ones(L, 2, 3).index_select(0, tensor(L, [0.0])),
    "masked_fill by a float mask": lambda L: ones(L, 2, 3).masked_fill(ones(L, 2, 3), 0.0),
    "masked_fill by a mask that does not broadcast": lambda L: ones(L, 2, 3).masked_fill(ones(L, 4, dtype="bool"), 0),
    "masked_select by a float mask": lambda L: ones(L, 3).masked_select(ones(L, 3)),
    "setitem of a value that does not broadcast": lambda L: ones(L, 2, 3).__setitem__(0, ones(L, 4)),
    "one_hot of floats": lambda L: fn("one_hot")(L, ones(L, 3), 3),
    # elementwise
    "add of shapes that do not broadcast": lambda L: ones(L, 2, 3) + ones(L, 4),
    "where of shapes that do not broadcast": lambda L: (torch.where if L is torch else Tensor.where)(
        ones(L, 2, 3, dtype="bool"), ones(L, 3), ones(L, 4)
    ),
    "subtract bools": lambda L: ones(L, 2, dtype="bool") - ones(L, 2, dtype="bool"),
    "bitwise and of floats": lambda L: ones(L, 2) & ones(L, 2),
    "lerp of ints": lambda L: ones(L, 2, dtype="int").lerp(ones(L, 2, dtype="int"), 0.5),
    "fmod of shapes that do not broadcast": lambda L: ones(L, 2, 3).fmod(ones(L, 4)),
    "isclose with a negative rtol": lambda L: ones(L, 2).isclose(ones(L, 2), rtol=-1.0),
    # reductions
    "sum dim out of range": lambda L: ones(L, 2, 3).sum(2),
    "sum of one dim twice": lambda L: ones(L, 2, 3).sum((0, 0)),
    "sum over dim 1 of a 0-d tensor": lambda L: ones(L).sum(1),
    "mean dim out of range": lambda L: ones(L, 2, 3).mean(-3),
    "max of nothing": lambda L: ones(L, 0).max(),
    "max over an empty dim": lambda L: ones(L, 2, 0).max(1),
    "argmax dim out of range": lambda L: ones(L, 2, 3).argmax(2),
    "argmax of nothing": lambda L: ones(L, 0).argmax(),
    "amax of nothing": lambda L: ones(L, 0).amax(),
    "softmax dim out of range": lambda L: ones(L, 2, 3).softmax(2),
    "log_softmax dim out of range": lambda L: ones(L, 2, 3).log_softmax(-3),
    "cumsum dim out of range": lambda L: ones(L, 2, 3).cumsum(2),
    "topk of more than there are": lambda L: ones(L, 2, 3).topk(4),
    "sort dim out of range": lambda L: ones(L, 2, 3).sort(2),
    "argsort dim out of range": lambda L: ones(L, 2, 3).argsort(2),
    "logsumexp dim out of range": lambda L: ones(L, 2, 3).logsumexp(2),
    "logcumsumexp dim out of range": lambda L: ones(L, 2, 3).logcumsumexp(2),
    "var dim out of range": lambda L: ones(L, 2, 3).var(3),
    "item of many": lambda L: ones(L, 2, 3).item(),
    "bool of many": lambda L: bool(ones(L, 2, 3)),
    "len of 0-d": lambda L: len(ones(L)),
    # linear algebra
    "matmul of inner sizes that differ": lambda L: ones(L, 2, 3) @ ones(L, 4, 5),
    "matmul of a 0-d tensor": lambda L: ones(L) @ ones(L, 2),
    "matmul of batches that do not broadcast": lambda L: ones(L, 2, 2, 3) @ ones(L, 3, 3, 4),
    "matmul of bools": lambda L: ones(L, 2, 2, dtype="bool") @ ones(L, 2, 2, dtype="bool"),
    "dot of sizes that differ": lambda L: ones(L, 3).dot(ones(L, 4)),
    "mm of a vector": lambda L: ones(L, 3).mm(ones(L, 3, 2)),
    "bmm of batches that differ": lambda L: ones(L, 2, 3, 4).bmm(ones(L, 3, 4, 1)),
    "einsum of too few operands": lambda L: einsum(L, "ij,jk->ik", ones(L, 2, 3)),
    "einsum of sizes that differ": lambda L: einsum(L, "ij,jk->ik", ones(L, 2, 3), ones(L, 4, 5)),
    "linear of features that differ": lambda L: fn("linear")(L, ones(L, 2, 3), ones(L, 4, 5)),
    "qr of a vector": lambda L: torch.linalg.qr(ones(L, 3)) if L is torch else ones(L, 3).qr(),
    # nn
    "conv2d of channels that differ": lambda L: fn("conv2d")(L, ones(L, 1, 3, 5, 5), ones(L, 2, 4, 3, 3)),
    "conv2d of an input smaller than the kernel": lambda L: fn("conv2d")(L, ones(L, 1, 3, 2, 2), ones(L, 2, 3, 3, 3)),
    "conv2d of a 2-d input": lambda L: fn("conv2d")(L, ones(L, 3, 5), ones(L, 2, 3, 3, 3)),
    "max_pool2d of a kernel bigger than the input": lambda L: fn("max_pool2d")(L, ones(L, 1, 1, 2, 2), 3),
    "layer_norm of a shape that is not the input's": lambda L: fn("layer_norm")(L, ones(L, 2, 3), (4,)),
    "batch_norm of statistics of another size": lambda L: fn("batch_norm")(L, ones(L, 2, 3), ones(L, 4), ones(L, 4)),
    "cross_entropy of a target of another shape": lambda L: fn("cross_entropy")(L, ones(L, 2, 3), tensor(L, [0, 1, 2])),
    "nll_loss of a target of another shape": lambda L: fn("nll_loss")(L, ones(L, 2, 3), tensor(L, [0, 1, 2])),
    "mse_loss of shapes that do not broadcast": lambda L: fn("mse_loss")(L, ones(L, 2, 3), ones(L, 4, 3)),
    "scaled_dot_product_attention of sizes that differ": lambda L: fn("scaled_dot_product_attention")(
        L, ones(L, 1, 2, 3), ones(L, 1, 2, 4), ones(L, 1, 2, 4)
    ),
    "normalize dim out of range": lambda L: fn("normalize")(L, ones(L, 2, 3), dim=2),
    # creation and autograd
    "full of a negative size": lambda L: (torch.full if L is torch else Tensor.full)((-1, 2), 1.0),
    "zeros of a negative size": lambda L: (torch.zeros if L is torch else Tensor.zeros)(-1),
    "arange by a step of 0": lambda L: (torch.arange if L is torch else Tensor.arange)(0, 5, 0),
    "eye of a negative size": lambda L: (torch.eye if L is torch else Tensor.eye)(-1),
    "randn of a negative size": lambda L: (torch.randn if L is torch else Tensor.randn)(-1),
    "linspace of negative steps": lambda L: (torch.linspace if L is torch else Tensor.linspace)(0, 1, -1),
    "randperm of a negative count": lambda L: (torch.randperm if L is torch else Tensor.randperm)(-1),
    "a ragged nested list": lambda L: (torch.tensor if L is torch else Tensor)([[1, 2], [3]]),
    "requires_grad of an int tensor": lambda L: ones(L, 2, dtype="int").requires_grad_(),
    "backward of a tensor of many elements": lambda L: (ones(L, 2).requires_grad_() * 2).backward(),
    "integer division by zero": lambda L: (tensor(L, [1, 2]) // tensor(L, [0, 1])).tolist(),
}


def _raised(call, lib):
    try:
        out = call(lib)
        if lib is Tensor and isinstance(out, Tensor):
            out.realize()  # errors a kernel finds (an index, a divisor) raise here
    except Exception as e:  # noqa: BLE001 (any exception is what is compared)
        return e
    return None


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_call_raises_the_class_pytorch_raises(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation warnings of the calls themselves
        theirs = _raised(BAD_CALLS[name], torch)
    ours = _raised(BAD_CALLS[name], Tensor)
    assert theirs is not None, f"{name}: PyTorch accepts this call; the table lists calls it refuses"
    assert ours is not None, f"{name}: glassgrad accepts a call PyTorch refuses with {type(theirs).__name__}: {theirs}"
    assert isinstance(ours, type(theirs)), (f"{name}: glassgrad raises {type(ours).__name__} ({ours}); PyTorch raises "
                                            f"{type(theirs).__name__} ({theirs})")  # fmt: skip


def test_the_classes_are_pytorchs_and_glassgrads_at_once():
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, RuntimeError)
    assert issubclass(EmptyReductionError, IndexError) and issubclass(EmptyReductionError, RuntimeError)
    assert issubclass(DtypeError, TypeError) and issubclass(DtypeError, NotImplementedError)
    with pytest.raises(ValueError, match=r"cat: tensor 1 has shape \(2, 4\) but tensor 0 has \(2, 3\)"):
        Tensor.ones(2, 3).cat(Tensor.ones(2, 4))  # the message and the old class stay
