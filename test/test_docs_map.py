"""docs/architecture.md, docs/internals.md and docs/user-guide.md name only modules and files that exist."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# a path with a folder (engine/lazy.py, test/layers.py) or a bare file name (cstyle.py) that a doc names
PATH = re.compile(r"(?<![\w.-])((?:[\w\\-]+/)*[\w\\*-]+\.(?:py|md|html))(?![\w])")


def named_paths(doc: pathlib.Path) -> set[str]:
    return {m.replace("\\", "") for m in PATH.findall(doc.read_text())}


FOLDERS = ("glassgrad", "test", "bench", "examples", "docs", "tools")  # where a bare file name is looked for


def exists(name: str) -> bool:
    """A path relative to the repository, glassgrad/ or docs/, or a bare name (or glob) found in one of FOLDERS."""
    if "/" in name:
        return any(list(base.glob(name)) for base in (ROOT, ROOT / "glassgrad", ROOT / "docs"))
    return (ROOT / name).exists() or any(any(True for _ in (ROOT / f).rglob(name)) for f in FOLDERS)


@pytest.mark.parametrize("doc", ["architecture.md", "internals.md", "user-guide.md"])
def test_every_module_a_doc_names_exists(doc):
    missing = sorted(name for name in named_paths(ROOT / "docs" / doc) if not exists(name))
    assert not missing, f"docs/{doc} names files that do not exist: {missing}"


def test_the_check_catches_a_missing_module(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("engine/lazy.py and schedule/cache.py, `live.py`, renderer/\\_\\_init\\_\\_.py\n")
    assert sorted(n for n in named_paths(doc) if not exists(n)) == ["live.py", "schedule/cache.py"]
