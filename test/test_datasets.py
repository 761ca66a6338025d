"""nn.datasets: MNIST and Fashion-MNIST from idx files, and clear errors for missing, corrupt and foreign files."""

from __future__ import annotations

import gzip
import hashlib
import pathlib
import struct

import numpy as np
import pytest

from glassgrad import dtypes
from glassgrad.nn.datasets import CHECKSUMS, PROJECT_ROOT, mnist, read_idx
from helpers import missing

MNIST_DIR = PROJECT_ROOT / "datasets" / "mnist"
FASHION_DIR = pathlib.Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def no_data_override(monkeypatch):
    """$GLASSGRAD_DATA would be searched first; these tests say where the files are themselves."""
    monkeypatch.delenv("GLASSGRAD_DATA", raising=False)


@pytest.fixture(scope="module")
def mnist_arrays():
    return [t.numpy() for t in mnist()]


def idx_sha256(array: np.ndarray) -> str:
    """The sha256 of the idx file that holds `array`: a big-endian magic and shape, then the bytes."""
    magic = 2051 if array.ndim == 4 else 2049
    # images (n, 1, h, w) are stored as (n, h, w)
    shape = (array.shape[0], *array.shape[2:]) if array.ndim == 4 else array.shape
    header = struct.pack(f">I{len(shape)}I", magic, *shape)
    return hashlib.sha256(header + array.tobytes()).hexdigest()


def test_mnist_shapes_dtypes_and_first_labels():
    X_train, Y_train, X_test, Y_test = mnist()
    assert (X_train.shape, Y_train.shape) == ((60000, 1, 28, 28), (60000,))
    assert (X_test.shape, Y_test.shape) == ((10000, 1, 28, 28), (10000,))
    assert all(t.dtype == dtypes.uint8 for t in (X_train, Y_train, X_test, Y_test))
    assert Y_train[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert Y_test[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


def test_mnist_pixels_are_the_files_bytes(mnist_arrays):
    X_train, Y_train, X_test, Y_test = mnist_arrays
    assert int(X_train.sum(dtype=np.int64)) == 1567298545
    assert int(X_test.sum(dtype=np.int64)) == 264923200
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    for name, array in zip(names, mnist_arrays):
        assert idx_sha256(array) == CHECKSUMS["mnist"][name], name
    np.testing.assert_array_equal(np.bincount(Y_test), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    assert X_train.max() == 255 and X_train.min() == 0


def test_fashion_mnist_reads_the_debian_package():
    if not FASHION_DIR.exists():
        missing(f"Fashion-MNIST is not in {FASHION_DIR}: apt-get install -y dataset-fashion-mnist")
    X_train, Y_train, X_test, Y_test = mnist(fashion=True)
    assert (X_train.shape, Y_train.shape, X_test.shape, Y_test.shape) == (
        (60000, 1, 28, 28), (60000,), (10000, 1, 28, 28), (10000,))  # fmt: skip
    assert Y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert Y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert int(X_train.numpy().sum(dtype=np.int64)) == 3431114169
    assert int(X_test.numpy().sum(dtype=np.int64)) == 573469082


def test_mnist_in_an_empty_folder_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte") as error:
        mnist(path=tmp_path)
    assert f"looked in: {tmp_path}" in str(error.value)


def test_fashion_mnist_in_an_empty_folder_names_the_debian_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        mnist(fashion=True, path=tmp_path)


def corrupt_copy(folder: pathlib.Path, compress: bool) -> tuple[pathlib.Path, str]:
    """MNIST in `folder` with one byte of the training labels flipped; the corrupt file and its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CHECKSUMS["mnist"]:
        (folder / f"{name}.gz").symlink_to(MNIST_DIR / f"{name}.gz")
    raw = bytearray(gzip.decompress((MNIST_DIR / "train-labels-idx1-ubyte.gz").read_bytes()))
    raw[100] ^= 0x01
    (folder / "train-labels-idx1-ubyte.gz").unlink()
    bad = folder / ("train-labels-idx1-ubyte.gz" if compress else "train-labels-idx1-ubyte")
    bad.write_bytes(gzip.compress(bytes(raw)) if compress else bytes(raw))
    return bad, hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("compress", [True, False], ids=["gzip", "raw"])
def test_mnist_corrupt_file_names_the_file_and_both_checksums(tmp_path, compress):
    bad, sha = corrupt_copy(tmp_path, compress)
    with pytest.raises(ValueError, match="is corrupt") as error:
        mnist(path=tmp_path)
    message = str(error.value)
    assert str(bad) in message and sha in message and CHECKSUMS["mnist"]["train-labels-idx1-ubyte"] in message


def test_mnist_reads_glassgrad_data_first(tmp_path, monkeypatch):
    bad, sha = corrupt_copy(tmp_path / "mnist", compress=True)
    monkeypatch.setenv("GLASSGRAD_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=sha):
        mnist()


def test_read_idx_names_a_wrong_magic_number():
    with pytest.raises(ValueError, match=r"where.idx: magic number 2052 \(0x00000804\) is not an idx label"):
        read_idx(struct.pack(">II", 0x0804, 1) + b"\x00", "where.idx")
    with pytest.raises(ValueError, match="magic number 529205248 .* looks gzip-compressed"):  # a .gz read as raw
        read_idx(gzip.compress(struct.pack(">II", 2049, 1) + b"\x07"), "labels")


def test_read_idx_checks_the_payload_against_the_shape():
    payload, shape = read_idx(struct.pack(">IIII", 2051, 2, 2, 3) + bytes(range(12)), "ok")
    assert shape == (2, 2, 3) and payload == bytes(range(12))
    with pytest.raises(ValueError, match=r"shape \(2, 2, 3\) \(12 bytes\) but 11 follow"):
        read_idx(struct.pack(">IIII", 2051, 2, 2, 3) + bytes(11), "short")
    with pytest.raises(ValueError, match="too short for an idx file"):
        read_idx(b"\x00\x00\x08", "tiny")
    with pytest.raises(ValueError, match="too short for the header of an idx file of 3 dimensions"):
        read_idx(struct.pack(">II", 2051, 2), "cut")
