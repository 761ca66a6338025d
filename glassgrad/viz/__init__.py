"""VIZ=1: record every graph_rewrite call and every kernel compiled, and show them in a local web page at exit."""

from __future__ import annotations

import atexit

from glassgrad.viz import recorder


def start() -> None:
    """Record from now on, and serve the page on 127.0.0.1 when the program ends (engine/realize.py, under VIZ=1)."""
    if recorder.recorder is None:
        atexit.register(_serve_at_exit, recorder.start())


def _serve_at_exit(rec: recorder.Recorder) -> None:
    from glassgrad.viz.server import serve  # the server's imports are needed only now

    recorder.stop()  # the page's own graph work must not be recorded
    serve(rec)
