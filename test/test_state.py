"""nn.state: state dicts, safetensors files and PyTorch checkpoints, against torch and the safetensors package."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import pickle
import struct

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from glassgrad import Tensor, dtypes, nn
from glassgrad.nn.state import get_state_dict, load_state_dict, safe_load, safe_save, torch_load

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_example_model():
    """The Model class of examples/beautiful_mnist.py."""
    spec = importlib.util.spec_from_file_location("beautiful_mnist", ROOT / "examples" / "beautiful_mnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model


class TorchMnistModel(torch.nn.Module):
    """beautiful_mnist's Model in torch, one module per entry of `layers` so the state dict keys match."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 5), torch.nn.ReLU(),
            torch.nn.BatchNorm2d(32), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),
            torch.nn.Conv2d(64, 64, 3), torch.nn.ReLU(),
            torch.nn.BatchNorm2d(64), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(1), torch.nn.Linear(576, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.layers(x)


# ---- a PyTorch state dict for the MNIST model ----


def test_torch_state_dict_of_mnist_model_gives_torch_logits(tmp_path):
    torch.manual_seed(0)
    theirs = TorchMnistModel()
    with torch.no_grad():  # running statistics and affine parameters as after some training
        for module in theirs.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.num_batches_tracked.fill_(70)
    theirs.eval()
    torch.save(theirs.state_dict(), tmp_path / "mnist.pt")

    ours = load_example_model()()
    assert list(get_state_dict(ours)) == list(theirs.state_dict())
    load_state_dict(ours, torch_load(str(tmp_path / "mnist.pt")))
    assert get_state_dict(ours)["layers.4.num_batches_tracked"].item() == 70

    x = np.random.default_rng(0).uniform(0, 1, (4, 1, 28, 28)).astype(np.float32)
    with Tensor.train(False):
        logits = ours(Tensor(x)).numpy()
    np.testing.assert_allclose(logits, theirs(torch.tensor(x)).detach().numpy(), atol=1e-5, rtol=1e-5)


# ---- load_state_dict is strict ----


def small_model():
    return {"fc": nn.Linear(3, 2), "norm": nn.LayerNorm(2)}


def full_state(model) -> dict[str, Tensor]:
    return {k: Tensor.full(v.shape, 7.0) for k, v in get_state_dict(model).items()}


def test_load_state_dict_names_a_missing_key():
    state = full_state(small_model())
    del state["fc.bias"]
    with pytest.raises(KeyError, match=r"missing keys \['fc.bias'\]"):
        load_state_dict(small_model(), state)


def test_load_state_dict_names_an_unexpected_key():
    state = full_state(small_model()) | {"fc.extra": Tensor.zeros(4)}
    with pytest.raises(KeyError, match=r"unexpected keys \['fc.extra'\]"):
        load_state_dict(small_model(), state)


def test_load_state_dict_names_the_key_and_both_shapes_of_a_mismatch():
    state = full_state(small_model()) | {"fc.weight": Tensor.zeros(3, 2)}
    message = r"Shape mismatch in layer `fc.weight`: Expected shape \(2, 3\), but found \(3, 2\) in state dict"
    with pytest.raises(ValueError, match=message):
        load_state_dict(small_model(), state)


def test_failed_load_state_dict_leaves_the_model_unchanged():
    model = small_model()
    before = {k: v.numpy() for k, v in get_state_dict(model).items()}
    state = full_state(model) | {"norm.bias": Tensor.zeros(5)}  # the last key is wrong, the others are fine
    with pytest.raises(ValueError):
        load_state_dict(model, state)
    for key, value in get_state_dict(model).items():
        np.testing.assert_array_equal(value.numpy(), before[key], err_msg=key)


def test_load_state_dict_not_strict_loads_the_common_keys():
    model = small_model()
    load_state_dict(model, {"fc.bias": Tensor([1.0, 2.0]), "other": Tensor([0.0])}, strict=False)
    assert model["fc"].bias.tolist() == [1.0, 2.0]
    assert model["norm"].weight.tolist() == [1.0, 1.0]


# ---- safetensors ----

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]  # fmt: skip


def random_tensor(dtype, shape: tuple[int, ...], seed: int = 0) -> Tensor:
    """Random bit patterns of `dtype` (NaNs with payloads and infinities included for floats; 0/1 for bool)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = (rng.integers(0, 2, n) if dtype == dtypes.bool else rng.integers(0, 256, n)).astype(np.uint8).tobytes()
    if dtype == dtypes.float32 and n >= 8:  # a quiet NaN with a payload and -inf, exactly
        raw = struct.pack("<If", 0x7FC12345, float("-inf")) + raw[8:]
    return Tensor.frombuffer(raw, dtype, shape)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_safetensors_round_trip_is_bit_exact(dtype, tmp_path):
    tensors = {"matrix": random_tensor(dtype, (3, 5)), "empty": random_tensor(dtype, (0, 4)),
               "scalar": random_tensor(dtype, (), seed=1), "cube": random_tensor(dtype, (2, 2, 2), seed=2)}  # fmt: skip
    safe_save(tensors, str(tmp_path / "t.safetensors"))
    loaded = safe_load(str(tmp_path / "t.safetensors"))
    assert list(loaded) == list(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == dtype and loaded[name].shape == t.shape, name
        assert bytes(loaded[name].data()) == bytes(t.data()), name


def test_safe_save_writes_what_the_safetensors_package_reads(tmp_path):
    tensors = {name: random_tensor(dtype, (2, 3), seed=i) for i, (name, dtype) in
               enumerate((str(d), d) for d in ALL_DTYPES)}  # fmt: skip
    safe_save(tensors, str(tmp_path / "t.safetensors"), metadata={"format": "pt"})
    theirs = safetensors.torch.load_file(str(tmp_path / "t.safetensors"))
    for name, t in tensors.items():
        assert theirs[name].shape == t.shape, name
        assert theirs[name].contiguous().view(torch.uint8).numpy().tobytes() == bytes(t.data()), name


def test_file_written_by_the_safetensors_package_loads(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((4, 3)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16),
        "f64": rng.standard_normal((2, 2, 2)),
        "i64": rng.integers(-(2**62), 2**62, (3,)),
        "u8": rng.integers(0, 256, (2, 7)).astype(np.uint8),
        "bool": rng.random((3, 3)) < 0.5,
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 2), np.int32),
    }
    safetensors.numpy.save_file(arrays, str(tmp_path / "theirs.safetensors"), metadata={"source": "numpy"})
    loaded = safe_load(str(tmp_path / "theirs.safetensors"))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].shape == array.shape, name
        np.testing.assert_array_equal(loaded[name].numpy(), array, err_msg=name)
    assert nn.state.safe_load_metadata(str(tmp_path / "theirs.safetensors")) == {"source": "numpy"}


def write_safetensors(path: pathlib.Path, header: bytes, data: bytes, header_size: int | None = None) -> str:
    size = len(header) if header_size is None else header_size
    path.write_bytes(struct.pack("<Q", size) + header + data)
    return str(path)


def valid_file(tmp_path: pathlib.Path) -> bytes:
    safe_save({"a": Tensor(np.arange(16, dtype=np.float32))}, str(tmp_path / "ok.safetensors"))
    return (tmp_path / "ok.safetensors").read_bytes()


@pytest.mark.parametrize(
    "keep, message",
    [(0, "is empty"), (5, "too short"), (20, "the header says it is"), (-10, r"outside the \d+ bytes of data")],
    ids=["empty", "inside_size_field", "inside_header", "inside_data"],
)
def test_safe_load_of_a_truncated_file_is_a_clear_error(tmp_path, keep, message):
    whole = valid_file(tmp_path)
    path = tmp_path / "cut.safetensors"
    path.write_bytes(whole[:keep])
    with pytest.raises(ValueError, match=message):
        safe_load(str(path))


def test_safe_load_of_offsets_outside_the_file_is_a_clear_error(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}).encode()
    path = write_safetensors(tmp_path / "bad.safetensors", header, bytes(16))
    with pytest.raises(ValueError, match=r"'w' has data_offsets \[8, 24\] outside the 16 bytes of data"):
        safe_load(path)


def test_safe_load_of_offsets_that_disagree_with_the_shape_is_a_clear_error(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path = write_safetensors(tmp_path / "bad.safetensors", header, bytes(16))
    with pytest.raises(ValueError, match=r"'w' of shape \(4,\) and dtype F32 needs 16 bytes but .* span 8"):
        safe_load(path)


def test_safe_load_of_a_header_longer_than_the_file_is_a_clear_error(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = write_safetensors(tmp_path / "bad.safetensors", header, bytes(4), header_size=2**40)
    with pytest.raises(ValueError, match=f"header says it is {2**40} bytes, but the file has only"):
        safe_load(path)


def test_safe_load_of_a_header_that_is_not_json_is_a_clear_error(tmp_path):
    path = write_safetensors(tmp_path / "bad.safetensors", b"{not json at all", b"")
    with pytest.raises(ValueError, match="the header is not valid JSON"):
        safe_load(path)
    path = write_safetensors(tmp_path / "bad2.safetensors", b"\xff\xfe\x00", b"")
    with pytest.raises(ValueError, match="the header is not valid JSON"):
        safe_load(path)


def test_safe_load_of_an_unknown_dtype_names_the_tensor_and_the_dtype(tmp_path):
    header = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}).encode()
    path = write_safetensors(tmp_path / "bad.safetensors", header, bytes(4))
    with pytest.raises(ValueError, match="tensor 'w' .*F8_E4M3"):
        safe_load(path)


# ---- PyTorch checkpoints ----


class RunsShellCommand:
    """An object whose unpickling would call os.system (pickled as posix.system on Linux)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_torch_load_refuses_a_pickle_that_would_run_a_command(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.zeros(2), "payload": RunsShellCommand(f"echo pwned > {marker}")}, path)
    with pytest.raises(pickle.UnpicklingError, match=r"refers to posix\.system"):
        torch_load(str(path))
    assert not marker.exists(), "torch_load ran the command in the file"


def test_torch_load_of_a_file_that_is_not_a_zip_is_a_clear_error(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"this is not a checkpoint" * 10)
    with pytest.raises(ValueError, match="is not a zip-format PyTorch checkpoint"):
        torch_load(str(tmp_path / "junk.pt"))
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="is not a zip-format PyTorch checkpoint"):
        torch_load(str(tmp_path / "legacy.pt"))


def test_torch_load_reads_strided_views_and_int64_tensors(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    saved = {
        "transposed": base.t(),  # strides (1, 6)
        "sliced": base[1:, ::2],  # an offset and a step: no reshape of the storage gives it
        "row": base[2],  # an offset into a shared storage
        "permuted": torch.arange(60.0).reshape(3, 4, 5).permute(2, 0, 1),
        "expanded": torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 3),  # stride 0
        "int64": torch.tensor([[-(2**62), 5], [7, 2**62 + 3]], dtype=torch.int64),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.tensor([1.0, -1.0])),
    }
    torch.save(saved, tmp_path / "views.pt")
    loaded = torch_load(str(tmp_path / "views.pt"))
    assert list(loaded) == list(saved)
    for name, t in saved.items():
        assert loaded[name].shape == tuple(t.shape), name
        np.testing.assert_array_equal(loaded[name].numpy(), t.detach().numpy(), err_msg=name)
    assert loaded["int64"].dtype == dtypes.int64


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)  # fmt: skip
def test_torch_load_reads_every_dtype_exactly(dtype, tmp_path):
    t = torch.arange(-6, 6).reshape(3, 4).to(dtype) if dtype != torch.bool else torch.arange(12).reshape(3, 4) % 3 == 0
    torch.save({"t": t}, tmp_path / "t.pt")
    loaded = torch_load(str(tmp_path / "t.pt"))["t"]
    assert bytes(loaded.data()) == t.contiguous().view(torch.uint8).numpy().tobytes()


def test_torch_load_keeps_plain_containers(tmp_path):
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 3, "names": ["a", "b"], "pair": (1.5, None)}, tmp_path / "c.pt")
    loaded = torch_load(str(tmp_path / "c.pt"))
    assert loaded["epoch"] == 3 and loaded["names"] == ["a", "b"] and loaded["pair"] == (1.5, None)
    assert loaded["model"]["w"].tolist() == [1.0, 1.0]
