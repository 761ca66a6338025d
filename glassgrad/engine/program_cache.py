"""The program cache on disk: a kernel's AST, with its device's compiler and the flags that choose its
optimizations, to the ProgramSpec codegen made for it (name, source, launch sizes, counts, checks), so that a later
process skips choosing, lowering, simplifying, linearizing and rendering the kernels it has made before. The
binary is the compiler's own cache entry (table "kernels", by source), so neither is stored twice.

Entries live in the disk cache's table "programs" (disk_cache.py: written atomically, checked before use; a damaged
one is made again). The key holds a digest of glassgrad's own source, so a changed codegen never serves an old
program. The linear program itself is not kept: a loaded spec has none, so DEBUG=4 and VIZ=1, which show it,
lower the kernel again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pathlib
import pickle

from glassgrad.codegen import ProgramSpec
from glassgrad.disk_cache import cache_get, cache_put
from glassgrad.helpers import DEBUG, VIZ, getenv
from glassgrad.runtime.device import Device
from glassgrad.uop.ops import UOp

TABLE = "programs"


@functools.cache
def source_digest() -> str:
    """A digest of every Python file of glassgrad: a program made by other code is another entry."""
    digest = hashlib.sha256()
    root = pathlib.Path(__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def ast_text(ast: UOp) -> str:
    """The AST as text: each node's op, dtype, arg and sources by position, in walk order (one text per AST)."""
    position: dict[UOp, int] = {}
    lines = []
    for i, node in enumerate(ast.toposort()):
        position[node] = i
        lines.append(f"{node.op.name} {node.dtype!r} {node._key[3]!r} {[position[s] for s in node.src]}")
    return "\n".join(lines)


def program_key(device: str, ast: UOp, flags: tuple) -> str:
    compiler = Device[device].compiler
    name = device.split(":")[0]  # a second card of the same kind compiles the same (its arch is in the cache_key)
    return f"{source_digest()}\0{name}\0{type(compiler).__name__}\0{compiler.cache_key}\0{flags}\0{ast_text(ast)}"


def usable() -> bool:
    """Whether the cache serves: not under DISABLE_COMPILER_CACHE=1, nor where DEBUG=4 or VIZ=1 show the linear
    program a loaded spec lacks."""
    return DEBUG.value < 4 and not VIZ and not getenv("DISABLE_COMPILER_CACHE", 0)


def load_spec(device: str, ast: UOp, flags: tuple) -> ProgramSpec | None:
    """The spec made for this kernel by an earlier process, or None."""
    if not usable() or (data := cache_get(TABLE, program_key(device, ast, flags))) is None:
        return None
    try:
        spec = pickle.loads(data)
    except Exception:  # noqa: BLE001  (checksummed, so only a glassgrad that wrote other classes; made again)
        return None
    return spec if isinstance(spec, ProgramSpec) else None


def store_spec(device: str, ast: UOp, flags: tuple, spec: ProgramSpec) -> None:
    """Keep the spec made for this kernel for later processes (without its linear program)."""
    if usable():
        cache_put(TABLE, program_key(device, ast, flags), pickle.dumps(dataclasses.replace(spec, program=())))
