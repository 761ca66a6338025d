"""Bad input raises an error that names the op, the shapes or dtypes, and the fix."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from glassgrad import Device, Tensor, dtypes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- shapes ----


def test_broadcast_mismatch_names_op_shapes_and_fix(device):
    x, y = Tensor.ones(2, 3, device=device), Tensor.ones(4, device=device)
    message = (
        r"add: shapes \(2, 3\) and \(4,\) cannot broadcast: dimension -1 has sizes 3 and 4; sizes must match or be 1"
    )
    with pytest.raises(ValueError, match=message):
        x + y
    with pytest.raises(ValueError, match=r"mul: shapes \(4,\) and \(2, 3\) cannot broadcast.*reshape or unsqueeze"):
        y * x
    with pytest.raises(ValueError, match=r"where: shapes \(2, 3\) and \(4,\) cannot broadcast"):
        (x > 0).where(x, y)
    with pytest.raises(ValueError, match=r"<: shapes \(2, 3\) and \(4,\) cannot broadcast"):
        _ = x < y


def test_expand_of_a_dim_that_is_not_1(device):
    with pytest.raises(ValueError, match=r"expand: cannot expand shape \(2, 3\) to \(3, 3\): only size-1 dimensions"):
        Tensor.ones(2, 3, device=device).expand(3, 3)


@pytest.mark.parametrize(
    "new_shape, message",
    [((4,), r"reshape: cannot reshape tensor of shape \(2, 3\) \(6 elements\) into \(4,\) \(4 elements\); the "
            r"element count must not change"),
     ((-1, 4), r"reshape: cannot reshape tensor of shape \(2, 3\) \(6 elements\) into \(-1, 4\): the other sizes "
               r"multiply to 4, which does not divide 6"),
     ((-1, -1), r"reshape: only one dimension can be -1, got \(-1, -1\)"),
     ((7, 0), r"reshape: cannot reshape tensor of shape \(2, 3\) \(6 elements\) into \(7, 0\) \(0 elements\)")],
    ids=["wrong count", "-1 does not divide", "two -1", "to empty"],
)  # fmt: skip
def test_reshape_to_incompatible_size(device, new_shape, message):
    with pytest.raises(ValueError, match=message):
        Tensor.ones(2, 3, device=device).reshape(new_shape)


@pytest.mark.parametrize(
    "op, call",
    [("sum", lambda x: x.sum(axis=2)), ("max", lambda x: x.max(axis=(0, 5))), ("min", lambda x: x.min(axis=2)),
     ("mean", lambda x: x.mean(axis=-3)), ("transpose", lambda x: x.transpose(0, 3)), ("flip", lambda x: x.flip(2)),
     ("squeeze", lambda x: x.squeeze(2)), ("flatten", lambda x: x.flatten(3))],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_axis_out_of_range_names_op_shape_and_valid_range(device, op, call):
    axis = r"(2|5|-3|3)"
    with pytest.raises(IndexError, match=rf"{op}: dimension {axis} is out of range for a tensor of shape \(2, 3\) "
                                         r"\(expected -2 to 1\)"):  # fmt: skip
        call(Tensor.ones(2, 3, device=device))


def test_unsqueeze_range_counts_the_new_dim(device):
    with pytest.raises(IndexError, match=r"unsqueeze: dimension 4 is out of range .* \(expected -3 to 2\)"):
        Tensor.ones(2, 3, device=device).unsqueeze(4)


@pytest.mark.parametrize("order", [(0, 0), (1,), (0, 1, -1)], ids=str)
def test_permute_that_is_not_a_permutation(device, order):
    message = f"permute: {order} is not a permutation of the 2 dimensions of (2, 3); name each of 0..1 exactly once"
    message = message.replace("-1", "1")  # reported wrapped
    with pytest.raises(RuntimeError, match=re.escape(message)):
        Tensor.ones(2, 3, device=device).permute(order)


def test_permute_of_a_dimension_out_of_range_is_an_index_error(device):
    with pytest.raises(IndexError, match=r"permute: dimension 2 is out of range .* \(expected -2 to 1\)"):
        Tensor.ones(2, 3, device=device).permute(0, 2)


def test_shrink_and_pad_with_wrong_arguments(device):
    x = Tensor.ones(2, 3, device=device)
    with pytest.raises(ValueError, match=r"shrink: range \(0, 3\) is outside a dimension of size 2 in \(2, 3\)"):
        x.shrink(((0, 3), None))
    with pytest.raises(ValueError, match=r"pad: need one \(before, after\) pair per dimension of \(2, 3\)"):
        x.pad(((1, 1),))


def test_index_errors_name_the_dimension_and_size(device):
    x = Tensor.ones(2, 3, device=device)
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 0 with size 2"):
        x[3]
    with pytest.raises(IndexError, match=r"too many indices for a tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match=r"an index can only have a single ellipsis"):
        x[..., ...]


def test_ragged_nested_list(device):
    with pytest.raises(ValueError, match=r"Tensor: nested list is ragged: data\[0\] has shape \(2,\) but data\[1\] has "
                                         r"\(1,\)"):  # fmt: skip
        Tensor([[1, 2], [3]], device=device)


def test_unknown_dtype_and_device_list_the_choices():
    with pytest.raises(TypeError, match=r"unknown dtype 'float128'; use one of: bool, int8, .*float64"):
        Tensor([1], dtype="float128")
    with pytest.raises(ValueError, match=r"unknown device 'FOO'; glassgrad has: .*CPU.*PYTHON"):
        Tensor([1], device="FOO")


def test_mixing_devices_says_how_to_move(device):
    other = "PYTHON" if device == "CPU" else "CPU"
    with pytest.raises(ValueError, match=rf"add: tensors are on different devices: {device} and {other}; move one "
                                         r"with .to\(\)"):  # fmt: skip
        Tensor([1.0], device=device) + Tensor([1.0], device=other)


def test_dtype_errors_name_the_dtypes(device):
    with pytest.raises(TypeError, match=r"sub: subtracting bool tensors is not supported; use \^"):
        Tensor([True], device=device) - Tensor([False], device=device)
    with pytest.raises(ValueError, match=r"bitcast: dtypes.float and dtypes.char differ in size \(4 vs 1 bytes\)"):
        Tensor([1.0], device=device).bitcast(dtypes.int8)


def test_creation_errors(device):
    with pytest.raises(ValueError, match=r"zeros: sizes must be non-negative integers, got \(-1,\)"):
        Tensor.zeros(-1, device=device)
    with pytest.raises(ValueError, match=r"arange: step must not be zero"):
        Tensor.arange(0, 5, 0, device=device)


# ---- the device: a dtype it cannot hold, a C compiler that is missing ----


@pytest.fixture
def cpu_without_float64(monkeypatch):
    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "unsupported_dtypes", frozenset(renderer.unsupported_dtypes) | {dtypes.float64})


def test_dtype_the_device_cannot_hold(cpu_without_float64):
    message = r"device CPU cannot hold dtypes.double; cast to a supported dtype or use another device"
    with pytest.raises(TypeError, match=message):
        Tensor([1.0], dtype=dtypes.float64, device="CPU")
    with pytest.raises(TypeError, match=message):
        Tensor([1.0], device="CPU").cast(dtypes.float64)
    with pytest.raises(TypeError, match=message):
        Tensor([1.0], dtype=dtypes.float64, device="PYTHON").to("CPU")
    assert Tensor([1.0], dtype=dtypes.float64, device="PYTHON").item() == 1.0  # other devices still can


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (a fresh device and an empty kernel cache), glassgrad importable."""
    environment = {k: v for k, v in os.environ.items() if k not in ("CC", "DEBUG")}
    environment.update(PYTHONPATH=REPO, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=60)  # fmt: skip


def test_missing_compiler_from_cc_names_it_and_how_to_set_cc(tmp_path):
    done = _run_python("""
        from glassgrad import Tensor
        (Tensor([1.0, 2.0], device="CPU") * 3).tolist()
    """, CC=str(tmp_path / "no-such-cc"), XDG_CACHE_HOME=str(tmp_path / "cache"))  # fmt: skip
    assert done.returncode != 0
    assert f"C compiler '{tmp_path / 'no-such-cc'}' not found" in done.stderr
    assert "set CC" in done.stderr


def test_no_compiler_on_path_lists_those_looked_for(tmp_path):
    done = _run_python("""
        from glassgrad import Tensor
        (Tensor([1.0, 2.0], device="CPU") * 3).tolist()
    """, PATH=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))  # fmt: skip
    assert done.returncode != 0
    assert "none of gcc, clang or cc is on PATH" in done.stderr
    assert "set CC=/path/to/compiler" in done.stderr


def test_python_device_needs_no_compiler(tmp_path):
    done = _run_python("""
        from glassgrad import Tensor
        print((Tensor([1.0, 2.0], device="PYTHON") * 3).tolist())
    """, PATH=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 6.0]"
