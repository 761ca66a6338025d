"""Hostile and broken files for the other loaders: safetensors, MNIST's idx files, ONNX external data. Each
refusal is the loader's error class with a message naming the file and what is wrong; the memory a file can make a
loader take is bounded by what the file (or, for MNIST, the real dataset) holds. The files are made here."""

from __future__ import annotations

import gzip
import json
import os
import struct

import numpy as np
import pytest

from glassgrad import Tensor, nn
from glassgrad.nn.datasets import FILE_SIZES, mnist
from glassgrad.nn.state import load_state_dict, safe_load, safe_load_metadata
from helpers import peak_memory_growth_mb

MB = 2**20

# ---- safetensors ----


def write_safetensors(path, header: dict | bytes, data: bytes) -> str:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


def refused_safetensors(path: str, what: str) -> None:
    with pytest.raises(ValueError, match=what) as raised:
        safe_load(path)
    assert str(raised.value).startswith(f"safe_load: {path}")


def test_tensors_that_overlap_in_the_file_are_refused(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}  # fmt: skip
    path = write_safetensors(tmp_path / "overlap.safetensors", header, bytes(12))
    refused_safetensors(path, r"tensor 'b' at data_offsets \[4, 12\] overlaps the tensor before it")


def test_data_no_tensor_covers_is_refused(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    path = write_safetensors(tmp_path / "gap.safetensors", header, bytes(8))
    refused_safetensors(path, r"tensor 'a' at data_offsets \[4, 8\] leaves bytes 0..4 unused")


@pytest.mark.parametrize(
    "entry, what",
    [
        ({"dtype": "F32", "shape": [2.7], "data_offsets": [0, 8]}, r"has shape \[2.7\]; a shape is a list of ints"),
        ({"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}, r"has shape \[True\]"),
        ({"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]}, r"has data_offsets \['0', '8'\]; they are two"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8.0]}, r"has data_offsets \[0.0, 8.0\]"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}, r"has data_offsets \[0, 4, 8\]"),
        ({"dtype": 32, "shape": [2], "data_offsets": [0, 8]}, "has dtype 32, which glassgrad does not read"),
        ([0, 8], "has a malformed entry"),
    ],
    ids=["float in shape", "bool in shape", "string offsets", "float offsets", "three offsets", "int dtype", "list"],
)
def test_malformed_entries_name_the_file_and_the_tensor(tmp_path, entry, what):
    path = write_safetensors(tmp_path / "bad.safetensors", {"w": entry}, bytes(8))
    refused_safetensors(path, f"tensor 'w' {what}")


def test_a_header_nested_100000_deep_is_refused(tmp_path):
    path = write_safetensors(tmp_path / "deep.safetensors", b"[" * 100_000 + b"]" * 100_000, b"")
    refused_safetensors(path, "nested too deeply")


def test_metadata_that_is_not_strings_is_refused(tmp_path):
    header = {"__metadata__": {"epoch": 3}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    path = write_safetensors(tmp_path / "meta.safetensors", header, bytes(1))
    with pytest.raises(ValueError, match=f"{path}: __metadata__ must map names to strings"):
        safe_load_metadata(path)


def test_loading_takes_under_twice_the_file(tmp_path):
    array = np.arange(8 * MB, dtype=np.float32).reshape(2048, 4096)  # 32 MB in one tensor, 16 MB in another
    header = {"big": {"dtype": "F32", "shape": [2048, 4096], "data_offsets": [0, 32 * MB]},
              "half": {"dtype": "F32", "shape": [4 * MB], "data_offsets": [32 * MB, 48 * MB]}}  # fmt: skip
    path = write_safetensors(tmp_path / "big.safetensors", header, array.tobytes() + array.tobytes()[: 16 * MB])
    code = f"loaded = safe_load({path!r}); assert loaded['big'][2047, 4095].item() == {8 * MB - 1}"
    assert peak_memory_growth_mb(code, "from glassgrad.nn.state import safe_load") < 2 * 48 + 20


# ---- MNIST's idx files ----


def idx_images(count: int, tail: int = 0) -> bytes:
    return struct.pack(">IIII", 2051, count, 28, 28) + bytes(count * 784 + tail)


def refused_mnist(folder, bad, what: str) -> None:
    with pytest.raises(ValueError, match=what) as raised:
        mnist(path=folder)
    assert str(bad) in str(raised.value)


def test_a_gz_that_is_not_gzip_names_the_file(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte.gz"
    bad.write_bytes(idx_images(2))  # raw idx bytes under a .gz name
    refused_mnist(tmp_path, bad, "cannot be read as gzip: BadGzipFile")


def test_a_cut_gz_names_the_file(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(idx_images(60000))[:5000])
    refused_mnist(tmp_path, bad, "cannot be read as gzip: EOFError")


def test_a_header_declaring_another_size_is_refused_before_the_data_is_read(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(struct.pack(">IIII", 2051, 10**6, 28, 28) + bytes(1000)))
    refused_mnist(
        tmp_path, bad, f"header declares 784000016 bytes in all, but this file of mnist is {FILE_SIZES[bad.stem]}"
    )


def test_a_gzip_bomb_is_read_no_further_than_the_real_file(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte.gz"
    with gzip.open(bad, "wb", compresslevel=1) as f:  # the right header, then 300 MB more than it declares
        f.write(idx_images(60000))
        for _ in range(300):
            f.write(bytes(MB))
    assert bad.stat().st_size < 2 * MB
    refused_mnist(tmp_path, bad, "longer than the 47040016 bytes its header declares")
    grown = peak_memory_growth_mb(f"mnist(path={str(tmp_path)!r})", "from glassgrad.nn.datasets import mnist")
    assert grown < 45 + 25  # the size of the real file (45 MB) bounds it; before, the whole 345 MB, twice


# ---- ONNX external data ----


def model_with_external_weight(folder, location: str = "weight.data"):
    """y = x + w, with w (4 floats) kept in an external file; the model file's path."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 4.0], np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = str(folder / "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, location="weight.data", size_threshold=0)
    if location != "weight.data":  # point the tensor elsewhere, as a hostile file would
        model = onnx.load(path, load_external_data=False)
        for entry in model.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        onnx.save_model(model, path)
    return path


def test_external_weights_beside_the_model_are_read(tmp_path):
    from glassgrad.onnx import OnnxRunner

    out = OnnxRunner(model_with_external_weight(tmp_path))({"x": np.ones(4, np.float32)})["y"]
    assert out.tolist() == [2.0, 3.0, 4.0, 5.0]


def outside_file(tmp_path) -> str:
    secret = tmp_path / "secret.data"
    secret.write_bytes(np.array([9.0, 9.0, 9.0, 9.0], np.float32).tobytes())
    return str(secret)


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, kind):
    from glassgrad.onnx import OnnxError, OnnxRunner

    folder = tmp_path / "model"
    folder.mkdir()
    secret = outside_file(tmp_path)
    location = {"parent": "../secret.data", "absolute": secret, "symlink": "link.data"}[kind]
    if kind == "symlink":
        os.symlink(secret, folder / "link.data")
    path = model_with_external_weight(folder, location)
    with pytest.raises(OnnxError, match=f"{path}: tensor 'w' keeps its data in an external file, .* not inside"):
        OnnxRunner(path)


def test_external_data_past_the_end_of_its_file_is_refused(tmp_path):
    from glassgrad.onnx import OnnxError, OnnxRunner

    path = model_with_external_weight(tmp_path)
    (tmp_path / "weight.data").write_bytes(bytes(8))  # 2 of the 4 floats
    with pytest.raises(OnnxError, match=f"{path}: tensor 'w' .* do not lie inside its 8 bytes"):
        OnnxRunner(path)


# ---- load_state_dict ----


def test_load_state_dict_of_something_that_is_not_a_dict_says_what_it_expected():
    model = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="load_state_dict: expected a state dict .* got list"):
        load_state_dict(model, [Tensor.ones(2, 3), Tensor.ones(2)])
    with pytest.raises(TypeError, match=r"values must be Tensors; these are not: \{'weight': 'list'\}"):
        load_state_dict(model, {"weight": [[1.0] * 3] * 2, "bias": Tensor.ones(2)})
