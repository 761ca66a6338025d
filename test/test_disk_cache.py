"""The disk cache: a damaged entry (a compiled kernel's, or a program's: engine/program_cache.py) is built again with
one warning naming it, never loaded; an unusable cache folder is a warning, and glassgrad runs without it; the
folder moves with GLASSGRAD_CACHE_DIR, GLASSGRAD_CACHE=0 turns it off, and GLASSGRAD_CACHE_MB caps its size. Each
case runs in its own process with a fresh cache folder."""

import os
import subprocess
import sys

import pytest

from glassgrad import disk_cache

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = "from glassgrad import Tensor; print((Tensor([1.0, 2.0, 3.0, 4.0]) * 3.25 + 1.5).tolist())"
SCALED = "[4.75, 8.0, 11.25, 14.5]"  # computed by hand
SHIFT = "from glassgrad import Tensor; print((Tensor([1.0, 2.0, 3.0, 4.0]) - 1.0).tolist())"


def run(code: str, cache_home) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO, "XDG_CACHE_HOME": str(cache_home), "NO_COLOR": "1"}
    for name in ("DISABLE_COMPILER_CACHE", "GLASSGRAD_CACHE_DIR", "GLASSGRAD_CACHE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def entries(cache_home, table: str = "kernels") -> list:
    return sorted((cache_home / "glassgrad" / table).rglob("*"), key=str)


def only_entry(cache_home, code: str, table: str = "kernels"):
    """Run `code` in an empty cache and return the one entry of `table` it wrote."""
    done = run(code, cache_home)
    assert done.returncode == 0, done.stderr
    (path,) = [p for p in entries(cache_home, table) if p.is_file()]
    return path


def garble(data: bytes) -> bytes:
    middle = len(data) // 2  # inside the shared library's code
    return data[:middle] + b"\xff" * 64 + data[middle + 64 :]


def elf_of_another_kernel(tmp_path) -> bytes:
    """The bare shared library of another kernel (what an older glassgrad kept as an entry)."""
    return only_entry(tmp_path / "other", SHIFT).read_bytes()[disk_cache.HEADER.size :]


DAMAGE = {
    "cut to half": (lambda data, tmp: data[: len(data) // 2], "cut short"),
    "garbled code": (lambda data, tmp: garble(data), "does not match its checksum"),
    "empty": (lambda data, tmp: b"", "too short"),
    "not a shared library": (lambda data, tmp: b"hello, this is not ELF\n" * 20, "not a glassgrad cache entry"),
    "another kernel's entry": (lambda data, tmp: only_entry(tmp / "other", SHIFT).read_bytes(), "another key's"),
    "another kernel's bare library": (lambda data, tmp: elf_of_another_kernel(tmp), "not a glassgrad cache entry"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_built_again_with_one_warning_naming_it(damage, tmp_path):
    cache = tmp_path / "cache"
    path = only_entry(cache, SCALE)
    change, what = DAMAGE[damage]
    path.write_bytes(change(path.read_bytes(), tmp_path))
    done = run(SCALE, cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SCALED
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and what in warnings[0], done.stderr
    again = run(SCALE, cache)  # the entry was written back whole: no warning the next time
    assert again.returncode == 0 and again.stdout.strip() == SCALED and "Warning" not in again.stderr, again.stderr


PROGRAM_DAMAGE = ["cut to half", "garbled code", "empty", "another kernel's entry"]


@pytest.mark.parametrize("damage", PROGRAM_DAMAGE)
def test_a_damaged_program_entry_is_made_again_with_one_warning_naming_it(damage, tmp_path):
    cache = tmp_path / "cache"
    path = only_entry(cache, SCALE, "programs")
    change, what = DAMAGE[damage]
    other = (lambda: only_entry(tmp_path / "other", SHIFT, "programs").read_bytes()) if "another" in damage else None
    path.write_bytes(other() if other else change(path.read_bytes(), tmp_path))
    done = run(SCALE, cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SCALED
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and what in warnings[0], done.stderr
    again = run(SCALE, cache)
    assert again.returncode == 0 and again.stdout.strip() == SCALED and "Warning" not in again.stderr, again.stderr


def test_the_cache_folder_moves_with_its_variable_and_turns_off(tmp_path):
    moved = tmp_path / "moved"
    done = run(f"import os; os.environ['GLASSGRAD_CACHE_DIR'] = {str(moved)!r}\n{SCALE}\n"
               "import glassgrad; print(glassgrad.cache_dir())", tmp_path / "home")  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == [*SCALED.split(), str(moved)], done.stderr
    assert list((moved / "kernels").rglob("*")) and not (tmp_path / "home").exists()
    off = run(f"import os; os.environ['GLASSGRAD_CACHE'] = '0'\n{SCALE}\n"
              "import glassgrad; print(glassgrad.cache_dir())", tmp_path / "off")  # fmt: skip
    assert off.returncode == 0 and off.stdout.split() == [*SCALED.split(), "None"], off.stderr
    assert not (tmp_path / "off").exists()


def test_entries_hold_their_key_and_checksum_and_no_temporary_files_are_left(tmp_path):
    path = only_entry(tmp_path, SCALE)
    magic, key_digest, data_digest, length = disk_cache.HEADER.unpack(path.read_bytes()[: disk_cache.HEADER.size])
    data = path.read_bytes()[disk_cache.HEADER.size :]
    assert magic == disk_cache.MAGIC and path.name == key_digest.hex() and len(data) == length
    assert data_digest == disk_cache.hashlib.sha256(data).digest() and data[:4] == b"\x7fELF"
    assert not [p for p in entries(tmp_path) if p.name.endswith(".tmp")]


def file_in_the_way(tmp_path):
    (tmp_path / "glassgrad").write_text("not a folder")
    return tmp_path, "a file is where the folder should be"


def under_a_file(tmp_path):
    (tmp_path / "plain").write_text("")
    return tmp_path / "plain" / "cache", "NotADirectoryError"


def under_proc(tmp_path):
    return "/proc/self/glassgrad-test", "FileNotFoundError"  # nobody, root included, can make folders there


@pytest.mark.parametrize("folder", [file_in_the_way, under_a_file, under_proc])
def test_an_unusable_cache_folder_is_one_warning_and_runs_without_it(folder, tmp_path):
    cache, reason = folder(tmp_path)
    done = run(SCALE, cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SCALED
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and "without the disk cache" in warnings[0] and reason in warnings[0], done.stderr


def test_an_entry_that_cannot_be_written_is_one_warning_and_runs_without_it(tmp_path):
    (tmp_path / "glassgrad").mkdir()
    (tmp_path / "glassgrad" / "kernels").write_text("in the way")  # as a full disk or a read-only folder would
    done = run(SCALE, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == SCALED, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and "cannot write the cache entry" in warnings[0], done.stderr


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(disk_cache, "_usable", {})
    monkeypatch.setattr(disk_cache, "_warned", set())
    monkeypatch.setattr(disk_cache, "_written", {})
    return tmp_path


def test_a_write_that_fails_halfway_leaves_no_entry_and_no_temporary_file(fresh_cache, monkeypatch):
    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk_cache.os, "replace", disk_full)
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        disk_cache.cache_put("kernels", "key", b"data")
    assert not [p for p in (fresh_cache / "glassgrad").rglob("*") if p.is_file()]
    assert disk_cache.cache_get("kernels", "key") is None


def test_round_trip_and_keys_apart(fresh_cache):
    disk_cache.cache_put("beam", "one", b"[[1, 2, 3]]")
    disk_cache.cache_put("beam", "two", b"")
    assert disk_cache.cache_get("beam", "one") == b"[[1, 2, 3]]" and disk_cache.cache_get("beam", "two") == b""
    assert disk_cache.cache_get("beam", "three") is None and disk_cache.cache_get("kernels", "one") is None


def test_a_damaged_beam_choice_is_not_used(fresh_cache):
    disk_cache.cache_put("beam", "key", b'[["UPCAST", 0, 4]]')
    (path,) = [p for p in (fresh_cache / "glassgrad" / "beam").rglob("*") if p.is_file()]
    path.write_bytes(path.read_bytes()[: disk_cache.HEADER.size] + b'[["UPCAST", 0, 8]]')
    with pytest.warns(RuntimeWarning, match="does not match its checksum"):
        assert disk_cache.cache_get("beam", "key") is None


def test_past_the_size_cap_the_least_recently_used_entries_go(fresh_cache, monkeypatch):
    for i in range(8):
        disk_cache.cache_put("programs", f"key {i}", bytes(200))  # each entry: 200 bytes and its header
        path = disk_cache._entry_path("programs", f"key {i}")
        os.utime(path, (1000 + i, 1000 + i))  # written one after another, a second apart
    disk_cache.cache_get("programs", "key 0")  # read: now the most recently used
    monkeypatch.setenv("GLASSGRAD_CACHE_MB", "0.001")  # 1,000 bytes
    disk_cache.trim(fresh_cache / "glassgrad", disk_cache.cache_limit_bytes())
    kept = [i for i in range(8) if disk_cache._entry_path("programs", f"key {i}").exists()]
    size = disk_cache.HEADER.size + 200
    assert kept == [0, *range(8 - (900 // size - 1), 8)] and len(kept) * size <= 900  # 90% of the cap
    assert disk_cache.cache_get("programs", "key 0") == bytes(200)
