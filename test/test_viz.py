"""VIZ=1: the recorder of graph_rewrite calls and kernels, the graph drawings, the server, and the page in Chromium."""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from glassgrad import Device, Tensor, dtypes
from glassgrad.codegen import full_rewrite_to_sink
from glassgrad.engine import realize
from glassgrad.uop import rewrite
from glassgrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from glassgrad.viz import graph, recorder, server
from glassgrad.viz.recorder import recording, rule_source
from glassgrad.viz.server import VizData, make_server
from helpers import require_program

ROOT = pathlib.Path(__file__).resolve().parent.parent
loop_var = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 4),), 0)

# fmt: off
add_zero_and_mul_one = PatternMatcher([
    (UPat.var("x") + 0, lambda x: x),  # x + 0 = x
    (UPat.var("x") * 1, lambda x: x),  # x * 1 = x
])
# fmt: on
ADD_ZERO_ROW = '(UPat.var("x") + 0, lambda x: x),  # x + 0 = x'  # how the page shows the rule: its row in the table


def unique_kernel_input() -> Tensor:
    """An input whose kernels are new to this process and to the program cache on disk (kernels are compiled once per
    process, their specs kept across processes): its constant comes from the OS's entropy, not NumPy's global state,
    which a test run can leave seeded (the same constant in the next run was served from the disk cache, unrecorded)."""
    rng = np.random.default_rng()
    return Tensor(rng.random((3, 5), dtype=np.float32)).realize() * float(rng.random() + 7)


# ---- the recorder ----


def test_recorder_notes_each_rule_that_fired_and_the_graph_after_each_step():
    expr = (loop_var + 0) * 1
    with recording() as rec:
        out = graph_rewrite(expr, add_zero_and_mul_one)
    assert out is loop_var and len(rec.rewrites) == 1
    record = rec.rewrites[0]
    assert record.input is expr and record.output is out and record.kernel is None
    assert record.caller.startswith("test_recorder_notes_each_rule_that_fired")
    assert [(s.before, s.after) for s in record.steps] == [(loop_var + 0, loop_var), (loop_var * 1, loop_var)]
    assert [rule_source(s.rule)[0] for s in record.steps] == [
        '(UPat.var("x") + 0, lambda x: x),  # x + 0 = x',
        '(UPat.var("x") * 1, lambda x: x),  # x * 1 = x',
    ]
    assert (
        rule_source(record.steps[0].rule)[1] == f"{__file__}:{add_zero_and_mul_one.rules[0][1].__code__.co_firstlineno}"
    )
    assert record.graphs() == [expr, loop_var * 1, loop_var]


def test_a_call_where_no_rule_fires_is_recorded_with_no_steps():
    with recording() as rec:
        assert graph_rewrite(loop_var * 3, add_zero_and_mul_one) is loop_var * 3
    assert len(rec.rewrites) == 1 and rec.rewrites[0].steps == [] and rec.rewrites[0].graphs() == [loop_var * 3]


def test_rules_that_take_ctx_still_get_it_while_recording():
    seen = []
    pm = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda ctx, c: seen.append((ctx, c.arg)))])
    with recording():
        graph_rewrite(loop_var + 2, pm, ctx="the context")
    assert ("the context", 2) in seen and ("the context", 4) in seen


def test_a_rewrite_inside_a_rule_is_a_call_of_its_own():
    def fold_inner(x):
        inner = graph_rewrite(x, add_zero_and_mul_one)  # a rule that rewrites a subgraph
        return None if inner is x else inner.alu(Ops.NEG)

    outer = PatternMatcher([(UPat(Ops.NEG, src=(UPat.var("x"),)), fold_inner)])
    with recording() as rec:
        out = graph_rewrite((loop_var + 0).alu(Ops.NEG), outer)
    assert out is loop_var.alu(Ops.NEG)
    outer_call, *inner_calls = (
        rec.rewrites
    )  # the outer call is noted first; the rule ran twice, on NEG(x + 0) and NEG(x)
    assert [r.caller.split()[0] for r in inner_calls] == ["fold_inner", "fold_inner"]
    assert [[rule_source(s.rule)[0] for s in r.steps] for r in inner_calls] == [[ADD_ZERO_ROW], []]
    assert [inspect_name(s.rule) for s in outer_call.steps] == ["fold_inner"]


def inspect_name(rule) -> str:
    return rule_source(rule)[0].split(":")[0]


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 1, 4)])
def test_recording_changes_no_result(shape):
    x = Tensor(np.random.rand(*shape).astype(np.float32)).realize()
    [item] = [s for s in ((x * 2 + 1).sum(axis=-1)).schedule() if s.ast.op is Ops.SINK]
    plain = full_rewrite_to_sink(item.ast)
    with recording() as rec:
        recorded = full_rewrite_to_sink(item.ast)
    assert recorded is plain and [r.caller.split()[0] for r in rec.rewrites][-1] == "full_rewrite_to_sink"
    assert all(r.graphs()[-1] is r.output for r in rec.rewrites)  # replaying the steps reaches the output


def test_recording_stops_and_untraced_rewrites_are_not_recorded():
    with recording() as rec:
        pass
    graph_rewrite(loop_var + 0, add_zero_and_mul_one)
    assert rec.rewrites == [] and recorder.recorder is None and rewrite.rewrite_tracer is None
    assert realize.compile_tracer is None


HOOKS = """import os, sys
from glassgrad import Tensor
from glassgrad.engine import realize
from glassgrad.uop import rewrite
(Tensor([1.0, 2.0]) * 3).sum().realize()
print("glassgrad.viz" in sys.modules, realize.compile_tracer is not None, rewrite.rewrite_tracer is not None)
os._exit(0)  # VIZ=1 would serve the page at exit
"""


@pytest.mark.parametrize("viz, expected", [("0", "False False False"), ("1", "True True True")])
def test_viz_hooks_are_set_only_under_viz(viz, expected):
    """Without VIZ, compiling and rewriting pass through no viz module: viz/ is not even imported, and the hooks that
    VIZ=1's recorder sets (engine/realize.py's compile_tracer, uop/rewrite.py's rewrite_tracer) are None."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIZ": viz}
    done = subprocess.run([sys.executable, "-c", HOOKS], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == expected, done.stderr


def test_kernels_are_recorded_with_their_rewrites_and_source():
    y = unique_kernel_input()
    with recording() as rec:
        y.sum(axis=1).realize()
    [kernel] = rec.kernels
    assert (
        kernel.device == y.device
        and kernel.spec.name.startswith("r_")
        and f"void {kernel.spec.name}(" in kernel.spec.src
    )
    callers = [rec.rewrites[i].caller.split()[0] for i in kernel.rewrites]
    assert "full_rewrite_to_sink" in callers
    assert all(rec.rewrites[i].kernel == 0 for i in kernel.rewrites)
    assert any(r.kernel is None for r in rec.rewrites)  # the scheduler's rewrites belong to no kernel


# ---- graphs drawn by dot ----


@pytest.fixture
def dot():
    """Graphviz's dot, which draws the graphs (CI installs it; elsewhere a test without it skips)."""
    return require_program("dot", install="apt-get install -y graphviz")


def test_dot_source_has_every_node_and_edge_and_quotes_labels():
    expr = (loop_var + 2) * (loop_var + 2) + 1
    src = graph.dot_source(expr, {loop_var: "added"})
    nodes = expr.toposort()
    assert len(re.findall(r"^  n\d+ \[label=", src, re.M)) == len(nodes)
    assert len(re.findall(r"^  n\d+ -> n\d+;", src, re.M)) == sum(len(n.src) for n in nodes)
    assert src.count("penwidth=3") == 1 and graph.MARKS["added"] in src
    quoted = graph.dot_source(UOp(Ops.SINK, dtypes.void, (), 'say "hi" \\ bye'))
    assert '\\"hi\\"' in quoted and "\\\\ bye" in quoted


def test_render_svg_draws_one_svg_node_per_uop(dot):
    expr = (loop_var * 3 + 1) * (loop_var * 3 + 1)
    svg = graph.render_svg(expr)
    assert svg.startswith("<svg") and svg.count('class="node"') == len(expr.toposort())


def test_without_dot_it_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(graph.GraphvizMissing, match=r"install graphviz \(apt-get install graphviz"):
        graph.render_svg(loop_var + 1)
    with recording() as rec:
        graph_rewrite(loop_var + 0, add_zero_and_mul_one)
    data = VizData(rec)
    assert "apt-get install graphviz" in data.index()["graphviz"]
    step = data.rewrite(0, 1)
    assert "apt-get install graphviz" in step["before"]["error"] and "RANGE" in step["before"]["text"]


def test_a_rewrite_too_long_to_replay_shows_each_step_as_the_matched_node_and_its_replacement(dot, monkeypatch):
    expr = (loop_var + 0) * 1
    with recording() as rec:
        graph_rewrite(expr, add_zero_and_mul_one)
    monkeypatch.setattr(server, "REPLAY_BUDGET", 0)
    step = VizData(rec).rewrite(0, 1)
    assert not step["whole_graphs"]
    assert step["before"]["svg"].count('class="node"') == len((loop_var + 0).toposort())  # ADD, RANGE, two CONSTs
    assert step["after"]["svg"].count('class="node"') == len(loop_var.toposort())
    whole = VizData(rec).rewrite(0, 0)
    assert whole["whole_graphs"] and whole["before"]["svg"].count('class="node"') == len(expr.toposort())


def test_a_step_marks_what_the_rule_matched_what_it_returned_and_what_was_rebuilt_above():
    two, doubled, added = UOp.const(dtypes.int, 2), loop_var * 2, loop_var + loop_var  # the rule: x * 2 -> x + x
    before, after = doubled + 1, added + 1
    assert server._marks(before, after, "removed", doubled) == {doubled: "removed", two: "removed", before: "rebuilt"}
    assert server._marks(after, before, "added", added) == {added: "added", after: "rebuilt"}
    assert server._marks(before, after, "removed") == {doubled: "removed", two: "removed", before: "removed"}


# ---- the server, in this process ----


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def test_server_listens_on_loopback_and_answers_the_page_questions(dot):
    y = unique_kernel_input()
    with recording() as rec:
        (y + 1).realize()
    server = make_server(rec, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address
        base = f"http://127.0.0.1:{port}"
        assert host == "127.0.0.1"
        assert b'<ul id="rewrites">' in get(base + "/")
        index = json.loads(get(base + "/api/index"))
        assert len(index["rewrites"]) == len(rec.rewrites) and [k["name"] for k in index["kernels"]] == [
            rec.kernels[0].spec.name
        ]
        kernel = json.loads(get(base + "/api/kernel?i=0"))
        assert kernel["src"] == rec.kernels[0].spec.src and kernel["ast"]["svg"].startswith("<svg")
        fired = next(i for i, r in enumerate(rec.rewrites) if r.steps)
        step = json.loads(get(f"{base}/api/rewrite?i={fired}&step=1"))
        assert step["rule"] == rule_source(rec.rewrites[fired].steps[0].rule)[0]
        assert graph.MARKS["removed"] in step["before"]["svg"] and graph.MARKS["added"] in step["after"]["svg"]
        with pytest.raises(urllib.error.HTTPError, match="400"):
            get(f"{base}/api/rewrite?i={fired}&step={len(rec.rewrites[fired].steps) + 1}")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            get(base + "/etc/passwd")
    finally:
        server.shutdown()
        server.server_close()


# ---- the acceptance check: VIZ=1 on a small program, the page loaded in headless Chromium ----

SMALL_PROGRAM = "from glassgrad import Tensor; x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]); print(((x + 1) * 2).sum(axis=1).tolist())"  # noqa: E501
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,900", "--virtual-time-budget=15000"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium(url: str, profile: pathlib.Path, *flags: str) -> str:
    """Load `url` in headless Chromium (Debian's `chromium`) and return its stdout."""
    exe = require_program("chromium", "chromium-browser", install="apt-get install -y chromium")
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def viz_program():
    """A small program run with VIZ=1: yields the address it serves once it printed it; stopped after the test."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "WAYLAND_DISPLAY", "DEBUG")}
    env |= {"PYTHONPATH": str(ROOT), "VIZ": "1", "VIZ_PORT": str(port), "VIZ_SERVE_SECONDS": "300"}
    proc = subprocess.Popen([sys.executable, "-c", SMALL_PROGRAM], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while not any(f"serving {url}" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    try:
        yield url, lines
    finally:
        proc.kill()
        proc.wait()


def test_viz_page_lists_rewrites_and_kernels_and_draws_graphs_in_chromium(dot, viz_program, tmp_path):
    url, lines = viz_program
    assert lines[0].strip() == "[18.0, 36.0]" and not any("opened" in line for line in lines)  # no display: address
    index = json.loads(get(url + "api/index"))
    x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    [ast] = [s.ast for s in ((x + 1) * 2).sum(axis=1).schedule() if s.ast.op is Ops.SINK]

    dom = chromium(url, tmp_path / "profile", "--dump-dom")  # opens on the first kernel: its AST drawn
    assert len(re.findall(r'<li data-kernel="\d+"', dom)) == len(index["kernels"]) == 1
    assert len(re.findall(r'<li data-rewrite="\d+"', dom)) == len(index["rewrites"]) >= 3
    name = index["kernels"][0]["name"]
    assert f"kernel {name} on {Device.DEFAULT}" in dom and f"void {name}(" in dom
    assert dom.count("<svg") == 1 and dom.count('class="node"') == len(ast.toposort())

    fired = next(i for i, r in enumerate(index["rewrites"]) if r["steps"])
    step_url = f"{url}#rewrite={fired}&step=1"
    dom = chromium(step_url, tmp_path / "profile", "--dump-dom")
    step = json.loads(get(f"{url}api/rewrite?i={fired}&step=1"))
    assert dom.count("<svg") == 2 and 'class="node"' in dom  # before and after
    assert f"step 1: {step['rule']}".replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in dom

    shot = tmp_path / "viz.png"
    chromium(step_url, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
