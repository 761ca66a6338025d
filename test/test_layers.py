"""The import rule (test/layers.py): glassgrad keeps its layers, and the checker catches an arrow against them."""

import pathlib
import shutil

import pytest

from layers import check, imports_of

GLASSGRAD = pathlib.Path(__file__).resolve().parents[1] / "glassgrad"


def test_glassgrad_keeps_its_layers():
    problems = check(GLASSGRAD)
    assert not problems, "imports against the layers (test/layers.py):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "module, line, expected",
    [
        ("schedule/pack.py", "from glassgrad.runtime.device import Device\n",
         ["schedule.pack:{n} imports runtime.device: schedule may not import runtime"]),
        # a mixin builds graphs and asks device_info, never the runtime, about a device
        ("mixin/split_reduce.py", "from glassgrad.runtime.device import Device\n",
         ["mixin.split_reduce:{n} imports runtime.device: api may not import runtime"]),
        ("codegen/search.py", "def f():\n    from glassgrad.engine import realize\n",
         ["codegen.search:{n} function-local imports engine.realize: codegen may not import engine",
          "codegen.search:{n} function-local imports engine.realize, which imports it back: "
          "engine.realize -> engine.beam -> codegen.search"]),
    ],
)  # fmt: skip
def test_an_arrow_added_to_glassgrad_fails(tmp_path, module, line, expected):
    """The rule on glassgrad itself: one import against it, added to a copy of the package, is reported."""
    copy = tmp_path / "glassgrad"
    shutil.copytree(GLASSGRAD, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.html"))
    text = (copy / module).read_text()
    (copy / module).write_text(text + line)
    n = text.count("\n") + line.count("\n")  # the import's line: the last line a function-local one adds
    assert check(copy) == [e.format(n=n) for e in expected]


# ---- the checker itself, on a small package of three layers: low <- mid <- high ----

FAKE_LAYERS = {"low": ("low",), "mid": ("mid", "mid.*"), "high": ("", "high")}
FAKE_MAY_IMPORT = {"low": (), "mid": ("low",), "high": ("mid", "low")}
HEALTHY = {
    "__init__.py": "from pkg.high import run\n",
    "low.py": "VALUE = 1\n",
    "mid/__init__.py": "",
    "mid/core.py": "from pkg.low import VALUE\nfrom . import helper\n",
    "mid/helper.py": "import pkg.low\n",
    "high.py": "from pkg.mid.core import VALUE\n\ndef run():\n    from pkg.mid import helper\n    return VALUE\n",
}


def fake_package(tmp_path: pathlib.Path, changes: dict[str, str]) -> pathlib.Path:
    for name, text in {**HEALTHY, **changes}.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


def problems_in(tmp_path: pathlib.Path, changes: dict[str, str]) -> list[str]:
    return check(fake_package(tmp_path, changes), FAKE_LAYERS, FAKE_MAY_IMPORT)


def test_a_package_that_keeps_its_layers_passes(tmp_path):
    assert problems_in(tmp_path, {}) == []


def test_imports_are_found_in_every_form(tmp_path):
    found = {(i.source, i.target, i.local, i.type_only) for i in imports_of(fake_package(tmp_path, {}))}
    assert found == {
        ("", "high", False, False),
        ("mid.core", "low", False, False),
        ("mid.core", "mid.helper", False, False),  # relative, naming a submodule
        ("mid.helper", "low", False, False),
        ("high", "mid.core", False, False),
        ("high", "mid.helper", True, False),  # `from pkg.mid import helper`: the submodule, not the package
    }


@pytest.mark.parametrize(
    "changes, expected",
    [
        # an arrow up, at module level: against the layers, and a cycle
        ({"low.py": "from pkg.mid.core import VALUE\n"}, ["low:1 imports mid.core: low may not import mid"]),
        # inside a function: against the layers, and a dodged cycle
        ({"low.py": "def f():\n    from pkg import high\n"},
         ["low:2 function-local imports high: low may not import high"]),
    ],
)  # fmt: skip
def test_an_arrow_against_the_layers_fails(tmp_path, changes, expected):
    problems = problems_in(tmp_path, changes)
    assert problems[: len(expected)] == expected


def test_a_module_level_cycle_fails(tmp_path):
    problems = problems_in(tmp_path, {"mid/helper.py": "from pkg.mid import core\n"})
    assert problems == ["mid.core -> mid.helper -> mid.core"]


def test_a_local_import_that_dodges_a_cycle_fails(tmp_path):
    problems = problems_in(tmp_path, {"mid/helper.py": "def f():\n    from pkg.mid.core import VALUE\n"})
    assert problems == ["mid.helper:2 function-local imports mid.core, which imports it back: mid.core -> mid.helper"]


def test_a_local_import_without_a_cycle_passes(tmp_path):
    assert problems_in(tmp_path, {"mid/helper.py": "def f():\n    import pkg.low\n"}) == []


def test_an_annotation_may_name_a_class_of_any_layer(tmp_path):
    """A type-only import runs nothing: neither an arrow of the rule nor part of a cycle."""
    changes = {"low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.mid.core import VALUE\n"}
    assert problems_in(tmp_path, changes) == []


def test_a_module_of_no_layer_fails(tmp_path):
    assert problems_in(tmp_path, {"stray.py": "X = 1\n"}) == ["stray belongs to no layer"]
