"""Using glassgrad from several threads: one lock for what changes shared state, and each thread's own captures.

Graphs are shared by every thread (nodes are interned, a realize points every live tensor that reads a realized node
at its buffer), and so are the schedule cache, the compiled kernels and the random generator's state. So realizing
(kernelize, schedule, run), each TinyJit call (capture or replay) and each random draw hold `lock`, one thread at a
time; building graphs needs no lock. A thread's TinyJit capture records only the kernels that thread runs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

thread_id = threading.get_ident
lock = threading.RLock()  # re-entrant: a TinyJit call realizes inside its function, a first random draw realizes
_local = threading.local()


def one_thread_at_a_time(fn: F) -> F:
    """`fn` holding `lock`: a call waits while another thread realizes, captures or replays."""

    @functools.wraps(fn)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return fn(*args, **kwargs)

    return serialized  # type: ignore[return-value]


def captures() -> list[list]:
    """The TinyJit captures running in this thread: each kernel this thread runs is appended to each of them."""
    if (found := getattr(_local, "captures", None)) is None:
        found = _local.captures = []
    return found
