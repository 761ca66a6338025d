"""The VIZ=1 page: a standard-library HTTP server on 127.0.0.1 that answers questions about one recording."""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import shutil
import sys
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from glassgrad.helpers import getenv
from glassgrad.uop.ops import UOp
from glassgrad.viz.graph import DOT_MISSING, GraphvizMissing, render_svg
from glassgrad.viz.recorder import Recorder, RewriteRecord, rule_source

HOST = "127.0.0.1"  # loopback only: the page shows your program's graphs and source to no one else
DEFAULT_PORT = 8000
REPLAY_BUDGET = 400_000  # nodes visited replaying a rewrite's steps (about a second); beyond it steps show the part


def _graph(root: UOp, marks: dict[UOp, str] | None = None) -> dict[str, str]:
    """A graph for the page: its SVG, or why there is none and its text instead."""
    try:
        return {"svg": render_svg(root, marks)}
    except (GraphvizMissing, ValueError) as e:
        return {"error": str(e), "text": repr(root)}


def _marks(graph: UOp, other: UOp, kind: str, changed_node: UOp | None = None) -> dict[UOp, str]:
    """Outlines for one side of a step: nodes of `graph` not in `other` get `kind` (removed or added), except those
    above `changed_node` (the node the rule matched, or what it returned), which were only rebuilt around it."""
    order, elsewhere = graph.toposort(), set(other.toposort())
    marks: dict[UOp, str] = {}
    above: set[UOp] = set()
    for node in order:  # sources come first, so each node's sources are decided before it
        if changed_node is not None and any(s is changed_node or s in above for s in node.src):
            above.add(node)
        if node not in elsewhere:
            marks[node] = "rebuilt" if node in above else kind
    return marks


class VizData:
    """Answers the page's requests about one recording; draws each graph when first asked and keeps it."""

    def __init__(self, rec: Recorder):
        self.rec = rec
        self.lock = threading.Lock()  # the server answers on several threads; graphs are built once

    def index(self) -> dict[str, Any]:
        """Every rewrite call and every kernel, in the order they happened."""
        kernels = self.rec.kernels
        return {
            "rewrites": [
                {"caller": r.caller, "steps": len(r.steps), "kernel": r.kernel, "kernel_name": _kernel_name(kernels, r)}
                for r in self.rec.rewrites
            ],
            "kernels": [
                {"name": k.spec.name if k.spec else "(failed)", "device": k.device, "rewrites": k.rewrites}
                for k in kernels
            ],
            "graphviz": None if shutil.which("dot") else DOT_MISSING,
        }

    @functools.cache  # noqa: B019 (one VizData per server, alive as long as it)
    def _states(self, i: int) -> list[UOp] | None:
        """The whole graph after each step of rewrite `i`, or None where replaying them all would take too long."""
        record = self.rec.rewrites[i]
        return record.graphs() if len(record.input.toposort()) * len(record.steps) <= REPLAY_BUDGET else None

    @functools.cache  # noqa: B019
    def rewrite(self, i: int, step: int) -> dict[str, Any]:
        """One rewrite call at one step: the graph before and after it and the rule that fired (step 0: the call)."""
        record = self.rec.rewrites[i]
        if not 0 <= step <= len(record.steps):
            raise IndexError(f"rewrite {i} has steps 0 to {len(record.steps)}")
        with self.lock:
            states = self._states(i)
        fired = record.steps[step - 1] if step else None
        if fired is None:
            before, after = record.input, record.output
        elif states is not None:
            before, after = states[step - 1], states[step]
        else:  # a long rewrite of a big graph: the node the rule matched and what it returned
            before, after = fired.before, fired.after
        rule, where = rule_source(fired.rule) if fired else (f"all {len(record.steps)} steps", "")
        return {
            "caller": record.caller,
            "kernel": record.kernel,
            "kernel_name": _kernel_name(self.rec.kernels, record),
            "step": step,
            "steps": [rule_source(s.rule)[0] for s in record.steps],
            "whole_graphs": step == 0 or states is not None,
            "rule": rule,
            "where": where,
            "before": _graph(before, _marks(before, after, "removed", fired and fired.before)),
            "after": _graph(after, _marks(after, before, "added", fired and fired.after)),
        }

    @functools.cache  # noqa: B019
    def kernel(self, i: int) -> dict[str, Any]:
        """One kernel: its AST drawn, its optimizations, counts, generated source and linear program."""
        k = self.rec.kernels[i]
        spec = k.spec
        return {
            "name": spec.name if spec else "(failed)",
            "device": k.device,
            "opts": [repr(o) for o in spec.opts] if spec else [],
            "ops": spec.ops if spec else 0,
            "mem": spec.mem if spec else 0,
            "src": spec.src if spec else "",
            "program": _listing(spec.program) if spec else "",
            "ast": _graph(k.ast),
            "rewrites": [
                {"i": r, "caller": self.rec.rewrites[r].caller, "steps": len(self.rec.rewrites[r].steps)}
                for r in k.rewrites
            ],  # fmt: skip
        }


def _kernel_name(kernels: list, record: RewriteRecord) -> str | None:
    if record.kernel is None:
        return None
    spec = kernels[record.kernel].spec
    return spec.name if spec else "(failed)"


def _listing(program: tuple[UOp, ...]) -> str:
    """The linear program, one UOp a line: position, op, dtype, source positions, arg."""
    pos = {u: i for i, u in enumerate(program)}
    return "\n".join(
        f"{i:4d} {u.op.name:<14} {u.dtype!r:<22} {[pos.get(s) for s in u.src]} {u.arg!r}" for i, u in enumerate(program)
    )


class _Handler(BaseHTTPRequestHandler):
    data: VizData  # set on a subclass per server

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {key: int(values[0]) for key, values in parse_qs(url.query).items() if values[0].lstrip("-").isdigit()}
        try:
            if url.path in ("/", "/index.html"):
                page = importlib.resources.files("glassgrad.viz").joinpath("index.html").read_bytes()
                return self._send(200, "text/html; charset=utf-8", page)
            if url.path == "/api/index":
                return self._json(self.data.index())
            if url.path == "/api/rewrite":
                return self._json(self.data.rewrite(query["i"], query.get("step", 0)))
            if url.path == "/api/kernel":
                return self._json(self.data.kernel(query["i"]))
            self._send(404, "text/plain", b"not found")
        except (KeyError, IndexError) as e:
            self._send(400, "text/plain", f"bad request: {e}".encode())

    def _json(self, obj: Any) -> None:
        self._send(200, "application/json", json.dumps(obj).encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass  # the console is the program's; requests are not news


def make_server(rec: Recorder, port: int) -> ThreadingHTTPServer:
    """A server for one recording on 127.0.0.1:`port` (0: any free port); not yet serving."""
    handler = type("VizHandler", (_Handler,), {"data": VizData(rec)})
    return ThreadingHTTPServer((HOST, port), handler)


def _bind(rec: Recorder) -> ThreadingHTTPServer:
    """VIZ_PORT if set (an error if it is taken), else port 8000, else any free port."""
    if "VIZ_PORT" in os.environ:
        port = getenv("VIZ_PORT", DEFAULT_PORT)
        try:
            return make_server(rec, port)
        except OSError as e:
            raise SystemExit(f"VIZ: cannot listen on {HOST}:{port} (VIZ_PORT): {e.strerror}") from None
    try:
        return make_server(rec, DEFAULT_PORT)
    except OSError:
        return make_server(rec, 0)


def _has_display() -> bool:
    """Whether a browser window can open here: a desktop session, not a terminal on a server."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def serve(rec: Recorder) -> None:
    """Serve the page until Ctrl-C (or for VIZ_SERVE_SECONDS), opening a browser where there is one."""
    server = _bind(rec)
    url = f"http://{HOST}:{server.server_port}/"
    print(f"VIZ: {len(rec.rewrites)} rewrites and {len(rec.kernels)} kernels recorded; serving {url} "
          "(Ctrl-C to stop)", flush=True)  # fmt: skip
    if shutil.which("dot") is None:
        print(f"VIZ: {DOT_MISSING}; graphs are shown as text until then", flush=True)
    if _has_display() and webbrowser.open(url):
        print("VIZ: opened it in your browser", flush=True)
    if (seconds := getenv("VIZ_SERVE_SECONDS", 0.0)) > 0:
        threading.Timer(seconds, server.shutdown).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
