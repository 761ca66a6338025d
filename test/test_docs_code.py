"""Every ```python block of README.md and docs/**/*.md runs, and prints what the page says it prints.

How a page shows what a block prints (one of two ways, per block):

1. A ```text block right after the ```python block (only blank lines between) holds the block's exact output.
   Inside it, `<...>` stands for any text within one line: for values that change from run to run, such as times.
   Keep it rare; better not to print such values at all.
2. Otherwise, a top-level statement whose last line ends in `# -> text` must print exactly `text` (one line):
       print(x.tolist())  # -> [1, 2, 3]

A block that prints something not checked either way fails, so that every printed result on a page is checked.

A ```console block shows shell commands: each line that starts with `$ ` runs in bash from the repository root
(with this checkout first on PYTHONPATH and NO_COLOR set), and the lines up to the next `$ ` are its exact output,
`<...>` allowed as above.

The blocks of one page run in order in one namespace (a later block may use an earlier block's names), each page in
a fresh one, from the repository root, with Device.DEFAULT = "CPU", GlobalCounters reset, and DEBUG and NOOPT off
unless a block changes them. Blocks in other languages (```sh, ```text, plain ```) are shown, not run: use them for
commands that install or take long. A failure names the file, the line, and what was expected and printed.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import gc
import io
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import traceback

import pytest

from glassgrad import Context, Device, GlobalCounters, Tensor
from glassgrad.engine.lazy import pending_assigns

REPO = pathlib.Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
EXPECTED_OUTPUT = re.compile(r"#\s*->\s?(.*?)\s*$")  # `print(x)  # -> 30.0`
WILDCARD = "<...>"


def doc_files() -> list[pathlib.Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclasses.dataclass
class Block:
    """One fenced block of a page: its language, its text and the page line of its first line of text."""

    lang: str
    text: str
    line: int
    start: int  # where the opening fence starts and the closing fence ends, as offsets in the page
    end: int
    output: Block | None = None  # for a python block, the ```text block that shows its output


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1, m.start(), m.end())
            for m in FENCE.finditer(text)]  # fmt: skip


def python_blocks(text: str) -> list[Block]:
    """The page's ```python blocks, each with the ```text block that follows it, if any."""
    blocks: list[Block] = []
    previous: Block | None = None
    for block in fenced_blocks(text):
        if block.lang == "text" and previous is not None and previous.lang == "python":
            if not text[previous.end : block.start].strip():  # nothing but blank lines between them
                previous.output = block
        if block.lang == "python":
            blocks.append(block)
        previous = block
    return blocks


def output_matches(printed: str, expected: str) -> bool:
    printed_lines, expected_lines = printed.rstrip("\n").split("\n"), expected.rstrip("\n").split("\n")
    if len(printed_lines) != len(expected_lines):
        return False
    for got, want in zip(printed_lines, expected_lines):
        pattern = ".*".join(re.escape(part) for part in want.rstrip().split(WILDCARD))
        if not re.fullmatch(pattern, got.rstrip()):
            return False
    return True


def fail(where: str, message: str) -> None:
    pytest.fail(f"{where}: {message}", pytrace=False)


def run_block(name: str, block: Block, namespace: dict) -> None:
    """Run a block statement by statement, checking its output as the module docstring says."""
    lines = block.text.splitlines()
    printed_by_block = io.StringIO()
    unchecked: list[int] = []
    arrows_checked: set[int] = set()
    for statement in ast.parse(block.text, f"{name}:{block.line}").body:
        last = statement.end_lineno  # within the block
        ast.increment_lineno(statement, block.line - 1)  # tracebacks point at the page's lines
        code = compile(ast.Module([statement], type_ignores=[]), name, "exec")
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(code, namespace)
        except Exception as error:
            frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == name]
            line = frames[-1].lineno if frames else block.line + statement.lineno - 1
            fail(f"{name}:{line}", f"the example raised {type(error).__name__}: {error}\n"
                 + "".join(traceback.format_exception(error, limit=-8)))  # fmt: skip
        printed_by_block.write(printed.getvalue())
        expected = EXPECTED_OUTPUT.search(lines[last - 1])
        if block.output is None and expected:
            arrows_checked.add(last)
            if printed.getvalue().rstrip("\n") != expected.group(1):
                fail(f"{name}:{block.line + last - 1}", f"{lines[last - 1].strip()}\n"
                     f"  printed:  {printed.getvalue().rstrip()!r}\n  expected: {expected.group(1)!r}")  # fmt: skip
        elif block.output is None and printed.getvalue():
            unchecked.append(block.line + last - 1)
    arrows = [
        block.line + i for i, line in enumerate(lines) if EXPECTED_OUTPUT.search(line) and i + 1 not in arrows_checked
    ]
    if arrows:
        fail(f"{name}:{arrows[0]}", f"the `# ->` comments on lines {arrows} are not checked: put each at the end of a "
             "top-level statement, in a block that has no ```text block after it")  # fmt: skip
    if block.output is not None:
        got, want = printed_by_block.getvalue(), block.output.text
        if not output_matches(got, want):
            diff = difflib.unified_diff(want.rstrip("\n").split("\n"), got.rstrip("\n").split("\n"), "expected",
                                        "printed", lineterm="")  # fmt: skip
            fail(f"{name}:{block.line}", f"the block prints something else than the ```text block on line "
                 f"{block.output.line} shows:\n" + "\n".join(diff))  # fmt: skip
    elif unchecked:
        fail(f"{name}:{unchecked[0]}", f"the statements on lines {unchecked} print output that the page does not "
             "show; end each with `# -> <its output>`, or follow the block with a ```text block of it")  # fmt: skip


def run_page(path: pathlib.Path) -> int:
    """Run every python block of a page in one namespace; returns how many ran."""
    name = str(path.relative_to(REPO))
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__docs__"}
    old = Device.DEFAULT
    Device.DEFAULT = "CPU"
    gc.collect()  # as in a fresh process: tensors that earlier tests dropped are gone, and assigns they left are done
    if pending := pending_assigns():
        Tensor.realize(*pending)
    GlobalCounters.reset()
    try:
        with contextlib.chdir(REPO), Context(DEBUG=0, NOOPT=0):
            for block in blocks:
                run_block(name, block, namespace)
    finally:
        Device.DEFAULT = old
    return len(blocks)


def run_console(name: str, block: Block) -> None:
    """Run each `$ command` of a ```console block in bash and compare its output with the lines after it."""
    commands: list[tuple[int, str, list[str]]] = []  # page line, command, expected output lines
    for i, line in enumerate(block.text.splitlines()):
        if line.startswith("$ "):
            commands.append((block.line + i, line[2:], []))
        elif commands:
            commands[-1][2].append(line)
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "NOOPT", "DEV", "CPU", "PYTHON", "CUDA", "JIT")}
    with tempfile.TemporaryDirectory(prefix="glassgrad-docs-") as bin_dir:
        python = pathlib.Path(bin_dir, "python")  # `python` in a command is the interpreter running the tests
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        env.update(PYTHONPATH=str(REPO), NO_COLOR="1", PATH=bin_dir + os.pathsep + env.get("PATH", ""))
        # an empty cache, as on a user's first run: a kernel found in the program cache prints that it was
        env.update(GLASSGRAD_CACHE_DIR=str(pathlib.Path(bin_dir, "cache")))
        for line, command, expected in commands:
            done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=300)  # fmt: skip
            check_console_output(f"{name}:{line}", command, done, expected)


def check_console_output(where: str, command: str, done: subprocess.CompletedProcess, expected: list[str]) -> None:
    """The command succeeded and printed the expected lines."""
    if done.returncode != 0:
        fail(where, f"`{command}` exited with {done.returncode}:\n{done.stderr}")
    if not output_matches(done.stdout, "\n".join(expected)):
        diff = difflib.unified_diff(expected, done.stdout.rstrip("\n").split("\n"), "expected", "printed", lineterm="")
        fail(where, f"`{command}` prints something else than the page shows:\n" + "\n".join(diff))


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_examples_print_what_the_page_says(path):
    run_page(path)
    name = str(path.relative_to(REPO))
    for block in fenced_blocks(path.read_text(encoding="utf-8")):
        if block.lang == "console":
            run_console(name, block)


def test_every_section_of_the_user_guide_has_a_running_example():
    """docs/user-guide.md shows each topic (layers, optimizers, state dicts, sentence embeddings, datasets, TinyJit,
    mixed precision, devices) with code that the test above runs."""
    sections = re.split(r"^## ", (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8"), flags=re.MULTILINE)
    titles = [section.splitlines()[0] for section in sections[1:]]
    assert titles == ["Layers", "Optimizers", "State dicts, safetensors and PyTorch checkpoints",
                      "Sentence embeddings: all-MiniLM-L6-v2", "Datasets: MNIST and Fashion-MNIST",
                      "TinyJit: capture a step, replay it",
                      "Mixed precision: autocast and GradScaler", "Devices"]  # fmt: skip
    assert all(python_blocks(section) for section in sections[1:]), "a section of the user guide has no example"


# ---- the checker itself ----


def test_a_text_block_after_a_python_block_is_its_output():
    page = "```python\nprint(1)\n```\n\n```text\n1\n```\n```text\nnot an output\n```\n"
    (block,) = python_blocks(page)
    assert block.line == 2 and block.output is not None and block.output.text == "1\n"
    run_block("page.md", block, {})


def test_a_wrong_output_names_the_file_line_and_both_outputs():
    (block,) = python_blocks("intro\n\n```python\nx = 2\nprint(x)\n```\n```text\n3\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page\.md:4: .*-3.*\+2"):
        run_block("page.md", block, {})


def test_arrow_comments_check_one_statement_each():
    (block,) = python_blocks("```python\nprint('a')  # -> a\nprint(\n  'b'\n)  # -> c\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page\.md:5: .*printed:  'b'.*expected: 'c'"):
        run_block("page.md", block, {})


def test_unchecked_output_and_errors_fail_with_their_line():
    (block,) = python_blocks("```python\nx = 1\nprint(x)\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:3: the statements on lines \[3\] print output"):
        run_block("page.md", block, {})
    (block,) = python_blocks("```python\nx = 1\n\nx.foo()\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:4: the example raised AttributeError"):
        run_block("page.md", block, {})


def test_the_wildcard_matches_within_one_line_only():
    assert output_matches("took 1.25 ms\nok\n", "took <...> ms\nok")
    assert not output_matches("took 1.25 ms\nextra\nok\n", "took <...> ms\nok")
    assert not output_matches("took 1.25 s\n", "took <...> ms")


def test_an_arrow_comment_that_is_not_checked_fails():
    (block,) = python_blocks("```python\nx = [\n  1,  # -> 1\n]\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"page\.md:3: the `# ->` comments on lines \[3\] are not checked"):
        run_block("page.md", block, {})


def test_console_blocks_run_their_commands():
    (block,) = [b for b in fenced_blocks("```console\n$ echo 1; echo took 3 ms\n1\ntook <...> ms\n```\n")]
    run_console("page.md", block)
    (block,) = fenced_blocks("```console\n$ echo 2\n1\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page\.md:2: `echo 2` prints something else.*-1.*\+2"):
        run_console("page.md", block)
