"""docs/tensor.md and the Tensor class agree (test/test_docs_code.py runs the page's examples).

The page gives every public attribute of Tensor (a name without a leading "_") one entry, a list item that starts
"- `name(signature)`" ("- `Tensor.name(...)`" for static and class methods, "- `name`" for properties), and lists
the Python operators Tensor defines in one table, by their dunder names. A failure names what to add or remove.
"""

import inspect
import pathlib
import re

import pytest

from glassgrad import Tensor

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "tensor.md"

# the name is the first word inside the backticks, after an optional "Tensor."
ENTRY = re.compile(r"^- `(?:Tensor\.)?(\w+)[(`]", re.MULTILINE)
CONSTRUCTOR = "Tensor"  # the entry "- `Tensor(data, ...)`" documents Tensor.__init__, which dir() does not list
OPERATORS_HEADING = "## Python operators"
DUNDER = re.compile(r"`(__\w+__)`")

BINARY_OPERATORS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
                    "rshift")  # fmt: skip
OTHER_PROTOCOLS = ("neg", "pos", "abs", "invert", "lt", "le", "gt", "ge", "eq", "ne", "getitem", "setitem", "delitem",
                   "len", "bool", "contains", "iter", "float", "int", "index", "round")  # fmt: skip
# plain, reflected (2 + t) and in-place (t += 2) forms of each binary operator, and the other protocols
OPERATOR_DUNDERS = {f"__{form}{op}__" for op in BINARY_OPERATORS for form in ("", "r", "i")}
OPERATOR_DUNDERS |= {f"__{name}__" for name in OTHER_PROTOCOLS}


# ---- what the class has ----


def public_names() -> set[str]:
    return {name for name in dir(Tensor) if not name.startswith("_")}


def defined_operators() -> set[str]:
    """The operator dunders Tensor defines itself (or through its mixins), not those it inherits from object."""
    defined = set()
    for name in OPERATOR_DUNDERS:
        ours = getattr(Tensor, name, None)
        if ours is not None and ours is not getattr(object, name, None):
            defined.add(name)
    return defined


def is_method(raw) -> bool:
    """Functions, static and class methods, properties and callable objects; plain values such as Tensor.training
    are not methods and need no docstring."""
    return isinstance(raw, (staticmethod, classmethod, property)) or callable(raw)


def function_of(raw):
    return raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw


def own_docstring(raw) -> str | None:
    """The docstring written for this attribute, not one inherited from a base class or from a builtin type."""
    fn = function_of(raw)
    if inspect.isfunction(fn) or isinstance(fn, property):
        return fn.__doc__
    return type(fn).__doc__  # a callable object such as Tensor.no_grad: its class says what it is


def where_defined(raw) -> str:
    fn = function_of(raw)
    fn = fn.fget if isinstance(fn, property) else fn
    if not inspect.isfunction(fn):
        fn = type(fn)
    try:
        path = pathlib.Path(inspect.getsourcefile(fn)).resolve()
        return f"{path.relative_to(REPO)}:{inspect.getsourcelines(fn)[1]}"
    except (TypeError, OSError, ValueError):
        return "source not found"


def suggested_entry(name: str) -> str:
    """The line docs/tensor.md needs for `name`, with its signature and the first line of its docstring."""
    raw = inspect.getattr_static(Tensor, name)
    fn = function_of(raw)
    on_class = isinstance(raw, (staticmethod, classmethod)) or not (inspect.isfunction(fn) or isinstance(fn, property))
    title = f"Tensor.{name}" if on_class else name
    if inspect.isfunction(fn):
        params = list(inspect.signature(fn).parameters.values())
        if not isinstance(raw, staticmethod):
            params = params[1:]  # self or cls
        params = [p.replace(annotation=inspect.Parameter.empty) for p in params]
        title += str(inspect.Signature(params))
    doc = own_docstring(raw) if is_method(raw) else None
    description = doc.strip().splitlines()[0] if doc and doc.strip() else "<one line: what it does>"
    return f"- `{title}`: {description}"


# ---- what the page says ----


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def documented_names() -> list[str]:
    """Every entry's name, in order, repeats included; entries live under the "## " headings, not in the intro."""
    text = doc_text()
    start = text.find("\n## ")
    sections = text[start:] if start >= 0 else ""
    return [name for name in ENTRY.findall(sections) if name != CONSTRUCTOR]


def operators_section() -> str:
    text = doc_text()
    start = text.find(OPERATORS_HEADING)
    if start < 0:
        pytest.fail(f"docs/tensor.md has no {OPERATORS_HEADING!r} section with the table of operators", pytrace=False)
    end = text.find("\n## ", start + len(OPERATORS_HEADING))
    return text[start : end if end >= 0 else len(text)]


def bulleted(lines) -> str:
    return "\n".join(f"  {line}" for line in lines)


# ---- the page lists the class, and the class has what the page lists ----


def test_every_public_attribute_is_documented():
    missing = sorted(public_names() - set(documented_names()))
    if missing:
        pytest.fail(f"docs/tensor.md has no entry for {len(missing)} public Tensor attribute(s); add each line under "
                    f"its group (and write the description where it says <one line>):\n"
                    + bulleted(suggested_entry(name) for name in missing), pytrace=False)  # fmt: skip


def test_every_documented_name_exists():
    unknown = sorted(set(documented_names()) - public_names())
    if unknown:
        pytest.fail(f"docs/tensor.md has entries for {len(unknown)} name(s) that Tensor does not have (renamed or "
                    f"removed?); fix or delete them:\n" + bulleted(unknown), pytrace=False)  # fmt: skip


COUNTERPARTS = re.compile(r"^  \[torch: .+ \| tinygrad: .+\]$")


def test_every_entry_names_its_pytorch_and_tinygrad_counterparts():
    """Each entry ends with a line `[torch: ... | tinygrad: ...]` (`=` the same name, `-` none)."""
    text = doc_text()
    lines = text[text.find("\n## ") :].split("\n")
    missing, current, marked = [], None, False
    for line in lines + ["## end"]:
        if ENTRY.match(line) or line.startswith("#") or not line.strip():
            if current is not None and not marked:
                missing.append(current)
            current, marked = (line[:70], False) if ENTRY.match(line) else (None, False)
        elif current is not None and COUNTERPARTS.match(line):
            marked = True
    if missing:
        pytest.fail(f"docs/tensor.md has {len(missing)} entries without their counterparts line "
                    f"'  [torch: ... | tinygrad: ...]':\n" + bulleted(missing), pytrace=False)  # fmt: skip


def test_each_name_is_documented_once():
    names = documented_names()
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        pytest.fail(f"docs/tensor.md has more than one entry for: {', '.join(repeated)}; keep one", pytrace=False)


def test_every_operator_is_in_the_table():
    listed = set(DUNDER.findall(operators_section()))
    missing, unknown = sorted(defined_operators() - listed), sorted(listed - defined_operators())
    problems = []
    if missing:
        problems.append(f"Tensor defines operators that the {OPERATORS_HEADING!r} table of docs/tensor.md does not "
                        f"list; add them to a row (operator, method, dunders):\n"
                        + bulleted(f"{name} ({where_defined(getattr(Tensor, name))})" for name in missing))  # fmt: skip
    if unknown:
        problems.append(f"the {OPERATORS_HEADING!r} table of docs/tensor.md lists operators that Tensor does not "
                        f"define; remove them:\n" + bulleted(unknown))  # fmt: skip
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_every_public_method_has_a_docstring():
    undocumented = []
    for name in sorted(public_names()):
        raw = inspect.getattr_static(Tensor, name)
        doc = own_docstring(raw)
        if is_method(raw) and not (doc and doc.strip()):
            undocumented.append(f"{name} ({where_defined(raw)})")
    if undocumented:
        pytest.fail(f"{len(undocumented)} public Tensor method(s) have no docstring; give each a one-line docstring "
                    f"that says what it does:\n" + bulleted(undocumented), pytrace=False)  # fmt: skip
