"""The DISK device (tensors whose bytes are a file, as tinygrad's) and nn.state's TensorIO, tar_extract and
zip_extract, against NumPy, the file's bytes and Python's tarfile and zipfile."""

import io
import os
import tarfile
import zipfile

import numpy as np
import pytest

from glassgrad import GlobalCounters, Tensor, dtypes
from glassgrad.nn.state import TensorIO, tar_extract, zip_extract
from glassgrad.runtime.ops_disk import DiskError
from glassgrad.schedule.kernelize import copy_disk_views, disk_span, new_buffer
from glassgrad.uop.ops import Ops, UOp

DTYPES = [(dtypes.float32, np.float32), (dtypes.int64, np.int64), (dtypes.uint8, np.uint8), (dtypes.bool, np.bool_),
          (dtypes.float16, np.float16)]  # fmt: skip


def _disk(path) -> str:
    return f"disk:{path}"


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 1, 3)], ids=str)
@pytest.mark.parametrize("dtype,np_dtype", DTYPES, ids=lambda d: str(d))
def test_a_tensor_written_to_disk_is_the_files_bytes_and_reads_back(device, tmp_path, shape, dtype, np_dtype):
    values = (np.arange(int(np.prod(shape))) * 3 - 4).reshape(shape).astype(np_dtype)
    path = tmp_path / "t.bin"
    written = Tensor(values, device=device).to(_disk(path)).realize()
    assert written.device == f"DISK:{path}" and path.read_bytes() == values.tobytes()
    back = Tensor.empty(*shape, dtype=dtype, device=_disk(path))
    np.testing.assert_array_equal(back.numpy(), values)
    np.testing.assert_array_equal(back.to(device).numpy(), values)
    assert back.tolist() == values.tolist()


def test_slices_reshapes_and_bitcasts_of_a_file_read_only_what_they_show(device, tmp_path):
    values = np.arange(60, dtype=np.float32).reshape(4, 15)
    path = tmp_path / "x.bin"
    path.write_bytes(values.tobytes())
    t = Tensor.empty(4, 15, dtype=dtypes.float32, device=_disk(path))
    cases = {
        "row": (t[2], values[2]),
        "rows": (t[1:3], values[1:3]),
        "one": (t[3, 14:15], values[3, 14:15]),
        "empty": (t[2:2], values[2:2]),
        "flat part": (t.reshape(60)[7:29], values.reshape(60)[7:29]),
        "column (strided)": (t[:, 4], values[:, 4]),
        "transposed": (t.T, values.T),
        "every other": (t[::2, 1::3], values[::2, 1::3]),
        "bitcast": (t[1].bitcast(dtypes.int32), values[1].view(np.int32)),
    }
    for name, (ours, expected) in cases.items():
        np.testing.assert_array_equal(ours.to(device).numpy(), expected, err_msg=name)
        np.testing.assert_array_equal(ours.numpy(), expected, err_msg=name)


def test_reading_past_the_end_of_the_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(10))
    with pytest.raises(DiskError, match=f"{path}.*reading bytes 0 to 12 of a file of 10 bytes"):
        Tensor.empty(3, dtype=dtypes.float32, device=_disk(path)).numpy()
    with pytest.raises(DiskError, match="past its end"):
        Tensor.empty(20, dtype=dtypes.uint8, device=_disk(path))[8:12].numpy()
    assert isinstance(DiskError("x"), RuntimeError)
    with pytest.raises(FileNotFoundError):
        Tensor.empty(3, dtype=dtypes.uint8, device=_disk(tmp_path / "missing.bin")).numpy()
    # a file larger than the tensor: the tensor is its first bytes
    assert Tensor.empty(2, dtype=dtypes.uint8, device=_disk(path)).tolist() == [0, 0]


def test_disk_runs_no_kernels_and_computing_on_it_says_to_move_first(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    t = Tensor.empty(8, dtype=dtypes.float32, device=_disk(path))
    before = GlobalCounters.kernel_count
    t[2:6].realize()
    t.reshape(2, 4).realize()
    assert GlobalCounters.kernel_count == before  # views of a file are read as they lie
    with pytest.raises(DiskError, match=r"runs no kernels.*\.to\('CPU'\)"):
        (t + 1).realize()
    assert (t.to("CPU") + 1).tolist() == [float(i + 1) for i in range(8)]


def test_writing_grows_a_file_and_keeps_what_lies_beyond_the_tensor(tmp_path):
    path = tmp_path / "g.bin"
    path.write_bytes(b"\xff" * 3)
    Tensor([1, 2], dtype=dtypes.int32).to(_disk(path)).realize()
    assert path.read_bytes() == np.array([1, 2], dtype=np.int32).tobytes()
    path.write_bytes(b"\xff" * 12)
    Tensor([7], dtype=dtypes.int32).to(_disk(path)).realize()
    assert path.read_bytes() == np.array([7], dtype=np.int32).tobytes() + b"\xff" * 8


def test_a_disk_device_needs_a_file():
    with pytest.raises(ValueError, match="needs a file"):
        Tensor.empty(2, device="disk")


def test_a_copy_of_a_strided_file_view_moves_below_the_view_rule_alone():
    buf = new_buffer("DISK:/nowhere", 12, dtypes.float32)
    strided = UOp(Ops.PERMUTE, dtypes.float32, (UOp(Ops.RESHAPE, dtypes.float32, (buf,), (3, 4)),), (1, 0))
    target = UOp(Ops.DEVICE, dtypes.void, (), "CPU")
    copy = UOp(Ops.COPY, dtypes.float32, (strided, target))
    moved = copy_disk_views.rewrite(copy)
    assert moved.op is Ops.PERMUTE and moved.src[0].op is Ops.RESHAPE and moved.base.op is Ops.COPY
    assert moved.base.src == (buf, target) and moved.shape == copy.shape and moved.device == "CPU"
    contiguous = UOp(Ops.SHRINK, dtypes.float32, (buf,), ((4, 8),))
    assert disk_span(contiguous) == (buf, 16)  # a run of the file: copied as it lies, no rule
    assert copy_disk_views.rewrite(UOp(Ops.COPY, dtypes.float32, (contiguous, target))) is None


def test_tensor_io_reads_and_seeks_as_a_file_of_the_same_bytes():
    data = bytes(range(256)) * 3
    ours, theirs = TensorIO(Tensor(data)), io.BytesIO(data)
    for op in [("read", 10), ("seek", 100, 0), ("read", 7), ("seek", -5, 1), ("read", 20), ("seek", -3, 2),
               ("read", 10), ("read", 4), ("seek", 10**6, 0), ("read", 1), ("seek", 0, 0), ("read", -1)]:  # fmt: skip
        assert getattr(ours, op[0])(*op[1:]) == getattr(theirs, op[0])(*op[1:]), op
    with pytest.raises(ValueError, match="negative seek"):
        ours.seek(-1)
    with pytest.raises(ValueError, match="1-D uint8"):
        TensorIO(Tensor([1.0, 2.0]))


def _tar(path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("source", ["path", "disk tensor", "cpu tensor"])
def test_tar_extract_gives_each_member_as_its_bytes(tmp_path, source):
    members = {"a.bin": b"hello", "dir/b.bin": bytes(range(200)) * 5, "empty": b""}
    path = tmp_path / "x.tar"
    _tar(path, members)
    arg = {"path": path, "disk tensor": Tensor.empty(os.path.getsize(path), dtype=dtypes.uint8, device=_disk(path)),
           "cpu tensor": Tensor(path.read_bytes())}[source]  # fmt: skip
    got = tar_extract(arg)
    assert {name: bytes(t.tolist()) for name, t in got.items()} == members
    with tarfile.open(path) as tar:  # Python's reader agrees
        assert {m.name: tar.extractfile(m).read() for m in tar} == members


def test_a_truncated_tar_is_an_error_naming_the_member(tmp_path):
    path = tmp_path / "x.tar"
    _tar(path, {"big.bin": bytes(5000)})
    cut = Tensor(path.read_bytes()[:2000])
    with pytest.raises((ValueError,), match="big.bin|not a readable tar"):
        tar_extract(cut)


def test_zip_extract_gives_stored_and_compressed_members(tmp_path):
    members = {"stored.bin": bytes(range(100)), "deflated.txt": b"abc" * 100, "dir/": b""}
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("stored.bin", members["stored.bin"], compress_type=zipfile.ZIP_STORED)
        zf.writestr(zipfile.ZipInfo("dir/"), b"")
        zf.writestr("deflated.txt", members["deflated.txt"], compress_type=zipfile.ZIP_DEFLATED)
    got = zip_extract(path)
    assert set(got) == {"stored.bin", "deflated.txt"}
    assert bytes(got["stored.bin"].tolist()) == members["stored.bin"] and got["stored.bin"].device.startswith("DISK")
    assert bytes(got["deflated.txt"].tolist()) == members["deflated.txt"]
    with pytest.raises(ValueError, match="not a readable zip"):
        zip_extract(Tensor(b"PK not really a zip file at all"))
