"""What every tiled matrix-product kernel for NVIDIA GPUs shares (renderer/cuda_tc.py, cuda_wgmma.py, cuda_simt.py).

- Which output tile a block computes (`tile_lines`): blocks take the batch entries in turn, and in each the tiles
  GROUP_M rows at a time, so that the panels they read stay in L2. Tiles at the edges run past the output; their
  extra rows and columns are computed from zeros and not stored.
- How one step of an operand's tile (rows x bk) goes from global to shared memory (`OperandCopy`), in one of three
  ways, the fastest the operand allows:
  - `cp.async` of 16-byte chunks, STAGES steps ahead of the math, where the operand is one input that lies in memory
    as the shared layout wants it (its rows or its k's contiguous) and 16 bytes aligned; chunks past the edge read
    fewer bytes (the rest zero-filled);
  - through registers, 16-byte chunks along its contiguous axis, where it is one input not 16-byte aligned (two
    aligned loads, shifted: a 50257-column matrix's rows start anywhere) or laid out the other way (each chunk's
    elements then go to their own lines);
  - through registers element by element, computing the prologue (casts, scales, masks over any number of inputs
    and views) with the operand's row, k and batch entry as variables.
  The register copies load one step ahead of where they store, so their loads are in flight under the math.
- How the shared memory of a stage is laid out (`TileLayout`): k-major (a line per row, along k) or row-major (a line
  per k, along the rows), 16-byte chunks placed by each kernel's own rule (a swizzle, or padding).
- The epilogue, the kernel's own ops after the sum, written once for one accumulator (`EpilogueWriter`) with the
  accumulator's row, column and batch entry as variables, and stored only inside the output.

All the copy instructions are inline PTX, so NVRTC needs no header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glassgrad.renderer.cstyle import CKernelWriter, CStyleRenderer
from glassgrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from glassgrad.codegen.tensor_cores import Matmul, Operand, Prologue, Strided

GROUP_M = 8  # blocks go through the output GROUP_M tile rows at a time, so that the panels they read stay in L2
INDEX_REGISTERS = 56  # registers a tiled kernel's addresses, loop counters and copies' index math take (ptxas -v)
ELEMENT_STAGING = 8  # elements a thread computes ahead at most (each holds its own index math in registers)

COPY_HELPERS = [
    "static inline unsigned gg_smem(const void* p) { unsigned a;"
    ' asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a; }',
    "// 16 bytes global -> shared, of which `bytes` are read and the rest zero-filled",
    "static inline void gg_cp_async16(unsigned dst, const void* src, unsigned bytes) {"
    ' asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(bytes)); }',
    "static inline void gg_cp_async16(unsigned dst, const void* src) {"
    ' asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src)); }',
    'static inline void gg_cp_async_commit() { asm volatile("cp.async.commit_group;"); }',
    "template <int N> static inline void gg_cp_async_wait() {"
    ' asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }',
    "// `bytes` (up to 16) from any address: the aligned 16-byte pieces around them, shifted",
    "static inline uint4 gg_loadu(const void* p, unsigned bytes) {"
    " const unsigned long long a = (unsigned long long)p; const unsigned s = (unsigned)a & 15u;"
    " const uint4* q = (const uint4*)(a - s); const uint4 lo = q[0], hi = s + bytes > 16 ? q[1] : lo;"
    " unsigned w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;"
    " if (s & 8) { w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7; }"
    " if (s & 4) { w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5; }"
    " const unsigned b = (s & 3) * 8;"
    " return make_uint4(__funnelshift_r(w0, w1, b), __funnelshift_r(w1, w2, b), __funnelshift_r(w2, w3, b),"
    " __funnelshift_r(w3, w4, b)); }",
    "// float32 bits rounded to TF32 (to nearest, as cuBLAS rounds them): the tensor cores read the top 19 bits",
    "static inline unsigned gg_tf32(unsigned x) { unsigned y;"
    ' asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(__uint_as_float(x))); return y; }',
    "static inline uint4 gg_tf32(uint4 v) {"
    " return make_uint4(gg_tf32(v.x), gg_tf32(v.y), gg_tf32(v.z), gg_tf32(v.w)); }",
    "static inline float gg_tf32(float x) { return __uint_as_float(gg_tf32(__float_as_uint(x))); }",
    "static inline uint4 gg_load8(const void* p) {"
    " const uint2 v = *(const uint2*)p; return make_uint4(v.x, v.y, 0u, 0u); }",
    "// the first n elements of a chunk at p (an edge of the matrix), the rest zero",
    "static inline uint4 gg_load_part(const unsigned short* p, int n) { unsigned w[4];"
    " for (int i = 0; i < 4; i++)"
    " w[i] = (2*i < n ? (unsigned)p[2*i] : 0u) | (2*i+1 < n ? (unsigned)p[2*i+1] << 16 : 0u);"
    " return make_uint4(w[0], w[1], w[2], w[3]); }",
    "static inline uint4 gg_load_part(const float* p, int n) { unsigned w[4];"
    " for (int i = 0; i < 4; i++) w[i] = i < n ? __float_as_uint(p[i]) : 0u;"
    " return make_uint4(w[0], w[1], w[2], w[3]); }",
]  # fmt: skip


class TileLayout:
    """One stage of an operand's tile (rows x bk elements of `size` bytes) in shared memory: k-major (a line per row,
    along k) or row-major (a line per k, along the rows), in 16-byte chunks; a subclass places the chunks."""

    def __init__(self, rows: int, bk: int, size: int, k_major: bool):
        self.rows, self.bk, self.size, self.k_major = rows, bk, size, k_major
        self.chunk = 16 // size  # elements in a chunk
        self.line_elems, self.lines = (bk, rows) if k_major else (rows, bk)
        self.chunks_per_line = self.line_elems // self.chunk

    @property
    def stage_bytes(self) -> int:
        return self.rows * self.bk * self.size

    def offset(self, line: str, chunk: str) -> str:
        """The C expression of the byte offset in a stage of chunk `chunk` of line `line`."""
        raise NotImplementedError

    def element_offset(self, row: str, k: str) -> str:
        """The C expression of the byte offset in a stage of the element at (row, k) of the tile."""
        line, along = (row, k) if self.k_major else (k, row)
        return f"{self.offset(line, f'({along})/{self.chunk}')} + (({along})%{self.chunk})*{self.size}"


def strided_origin(strided: Strided, batch_shape: tuple[int, ...], row0: str, buffer: str) -> str:
    """The C expression of the address of the element at (the block's batch entry, row0, k = 0)."""
    terms, inner = [str(strided.offset)], 1
    for size, stride in reversed(list(zip(batch_shape, strided.batch_strides))):
        if stride:
            terms.append(f"(long long)((gg_batch/{inner})%{size})*{stride}")
        inner *= size
    return f"{buffer} + ({' + '.join(terms)}) + (long long)({row0})*{strided.row_stride}"


class OperandCopy:
    """How one operand's tile of a step reaches shared memory (the module's docstring lists the ways).

    The kernel writes `declare()` once, `prefetch(kt)` where the loads of step kt may start (nothing for cp.async
    or a copy too large to stage in registers) and `commit(kt, stage)` where step kt's copy into `stage` may be
    issued or stored; `name` is A or B, and the kernel declares g<name> (the strided operand's origin), p<name> (the
    shared tile, a pointer) and s<name> (its shared-memory address). Modes: "async" (cp.async), "chunk" (one input's
    16-byte chunks through registers), "vector" (a prologue on 16-byte chunks, its inputs loaded side by side),
    "element" (a prologue element by element)."""

    def __init__(self, renderer: CStyleRenderer, name: str, operand: Operand, prologue: Prologue, layout: TileLayout,
                 threads: int, k: int, value_type: str, row0: str, registers: int, tf32: bool = False):  # fmt: skip
        self.renderer, self.name, self.operand, self.layout, self.threads = renderer, name, operand, layout, threads
        self.k, self.row0, self.value_type, self.prologue, self.tf32 = k, row0, value_type, prologue, tf32
        self.chunk, self.size = layout.chunk, layout.size
        strided = operand.strided
        self.contiguous_k = strided.k_stride == 1 if strided is not None else operand.k_fast
        self.aligned = False
        if strided is not None and (strided.k_stride == 1 or strided.row_stride == 1):
            other = strided.row_stride if self.contiguous_k else strided.k_stride
            self.aligned = all(x % self.chunk == 0 for x in (other, strided.offset, *strided.batch_strides))
            as_is = self.contiguous_k == layout.k_major and not tf32  # TF32 is rounded on its way, in registers
            self.mode = "async" if self.aligned and as_is else "chunk"
        else:
            self.mode = "vector" if prologue.chunk is not None else "element"
        self.element = epilogue_writer(renderer, "prologue", prologue.element)
        elements = layout.rows * layout.bk
        per_copy = 1 if self.mode == "element" else self.chunk
        assert elements % (per_copy * threads) == 0, "each thread copies whole chunks of every step"
        self.copies = elements // per_copy // threads
        self.words = 0 if self.mode == "async" else self.copies * (1 if self.mode == "element" else 4)
        self.staged = 0 < self.words <= registers and (self.mode != "element" or self.copies <= ELEMENT_STAGING)
        # the sizes are the kernel's own: where the tile divides them, no copy crosses an edge and none is tested
        self.row_edge, self.k_edge = operand.rows % layout.rows != 0, k % layout.bk != 0

    @property
    def register_type(self) -> str:
        return self.value_type if self.mode == "element" else "uint4"

    def declare(self) -> list[str]:
        if not self.staged:
            return []
        return [f"{self.register_type} r{self.name}[{self.copies}];  // the next step's {self.name}, on its way"]

    def prefetch(self, kt: str) -> list[str]:
        return self._loop(self._load(kt, f"r{self.name}[i]") if self.staged else [])

    def commit(self, kt: str, stage: str) -> list[str]:
        if self.mode == "async":
            return self._loop(self._async(kt, stage))
        if self.staged:
            return self._loop(self._store(stage, f"r{self.name}[i]"))
        body = [f"{self.register_type} v;", *self._load(kt, "v"), *self._store(stage, "v")]
        return self._loop(body, unroll=self.mode == "chunk")

    def _loop(self, body: list[str], unroll: bool = True) -> list[str]:
        """The copies of this thread, one after another; all in flight at once (`unroll`), or a prologue's one at a
        time where they load where they store (it has no registers for more)."""
        if not body:
            return []
        return ["#pragma unroll" if unroll else "#pragma unroll 1", f"for (int i = 0; i < {self.copies}; i++) {{",
                *self._piece(), *("  " + line for line in body), "}"]  # fmt: skip

    def _piece(self) -> list[str]:
        """This thread's i-th piece: its row r and k kk in the tile (of a chunk: its first element). Neighbouring
        threads take neighbouring pieces along the contiguous axis (for a prologue: the one its loads move least)."""
        line = f"  const int piece = threadIdx.x + i*{self.threads};"
        per = 1 if self.mode == "element" else self.chunk
        along = (self.layout.bk if self.contiguous_k else self.layout.rows) // per  # pieces along a contiguous line
        line += f" const int line = piece/{along}, chunk = piece%{along};"
        if self.contiguous_k:
            return [line, f"  const int r = line, kk = chunk*{per};"]
        return [line, f"  const int r = chunk*{per}, kk = line;"]

    def _chunk_offset(self) -> str:
        """Where this piece's chunk goes in a stage, where it is one chunk of a line of the layout."""
        return self.layout.offset("line", "chunk")

    def _valid(self, kt: str) -> str:
        """Elements of this chunk inside the operand (0 .. chunk): it may cross the edge of its contiguous axis."""
        rows, bk, ch = self.operand.rows, self.layout.bk, self.chunk
        row_in, k_in = f"{self.row0} + r < {rows}", f"({kt})*{bk} + kk < {self.k}"
        if self.contiguous_k:
            along = f"min(max({self.k} - (({kt})*{bk} + kk), 0), {ch})" if self.k_edge else str(ch)
            return f"({row_in} ? {along} : 0)" if self.row_edge else along
        along = f"min(max({rows} - {self.row0} - r, 0), {ch})" if self.row_edge else str(ch)
        return f"({k_in} ? {along} : 0)" if self.k_edge else along

    @property
    def edges(self) -> bool:
        return self.row_edge or self.k_edge

    def _source(self, kt: str) -> str:
        """The chunk's address: the step's offset added last, so the compiler keeps the rest in one register across
        steps (an int sum of both would need its own 64-bit add per copy)."""
        strided = self.operand.strided
        step = self.layout.bk * strided.k_stride
        return f"g{self.name} + r*{strided.row_stride} + kk*{strided.k_stride} + ({kt})*{step}"

    def _async(self, kt: str, stage: str) -> list[str]:
        target = f"s{self.name} + ({stage})*{self.layout.stage_bytes} + {self._chunk_offset()}"
        if not self.edges:
            return [f"gg_cp_async16({target}, {self._source(kt)});"]
        buffer = f"data{self.operand.strided.buffer.arg}"  # read nothing from, where n is 0: an address inside
        return [f"const int n = {self._valid(kt)};",
                f"gg_cp_async16({target}, n ? {self._source(kt)} : {buffer}, n*{self.size});"]  # fmt: skip

    def _load(self, kt: str, into: str) -> list[str]:
        if self.mode == "chunk":
            full = f"*(const uint4*)({self._source(kt)})" if self.aligned else f"gg_loadu({self._source(kt)}, 16)"
            if not self.edges:
                return [f"{into} = {full};"]
            return [f"const int n = {self._valid(kt)};",
                    f"{into} = n == {self.chunk} ? {full} : gg_load_part({self._source(kt)}, n);"]  # fmt: skip
        position = f"const int gg_r = {self.row0} + r, gg_k = ({kt})*{self.layout.bk} + kk;"
        if self.mode == "element":
            return [f"{into} = {self._zero()};", f"{{ {position}", *self._element(into), "}"]
        ch, rows, k = self.chunk, self.operand.rows, self.k
        position = position.replace("gg_r", "at_r").replace("gg_k", "at_k")  # the chunk's first element
        lanes = [f"lane{j}" for j in range(ch)]
        addresses, partial = self._addresses()
        if not self.edges and not partial:
            body = [*addresses.lines, *self._vector(addresses)]
            return [f"{{ {position}", f"  {self.value_type} {', '.join(lanes)};", *("  " + line for line in body),
                    f"  {into} = {self._pack(lanes)};", "}"]  # fmt: skip
        # a chunk across the operand's edge, or one whose loads some lanes must not read (a padded window's edge):
        # lane by lane, each inside or zero
        full = [f"at_r < {rows} && at_k + {ch} <= {k}" if self.contiguous_k else f"at_k < {k} && at_r + {ch} <= {rows}"]
        edge = []
        for j, lane in enumerate(lanes):
            at = ("at_r", f"at_k + {j}") if self.contiguous_k else (f"at_r + {j}", "at_k")
            edge += [f"{{ const int gg_r = {at[0]}, gg_k = {at[1]};", *self._element(lane), "}"]
        return [f"{{ {position}", f"  {self.value_type} {', '.join(f'{x} = {self._zero()}' for x in lanes)};",
                *("  " + x for x in addresses.lines), f"  if ({' && '.join(full[: self.edges] + partial)}) {{",
                *("    " + line for line in self._vector(addresses)), "  } else {", *("    " + line for line in edge),
                "  }", f"  {into} = {self._pack(lanes)};", "}"]  # fmt: skip

    def _zero(self) -> str:
        return "0.0f" if self.value_type == "float" else f"({self.value_type})0"

    def _element(self, into: str) -> list[str]:
        """The prologue at (gg_r, gg_k) into `into`, where that element is inside the operand."""
        inside = f"gg_r < {self.operand.rows} && gg_k < {self.k}" if self.edges else "true"
        return [f"  if ({inside}) {{", *("  " + x for x in self.element.lines),
                f"    {into} = {self.element.value};", "  }"]  # fmt: skip

    def _addresses(self) -> tuple[EpilogueWriter, list[str]]:
        """The chunk's vector loads' addresses and guards (its lines start with the chunk's position), and the guards
        that say every lane of a partial load is inside."""
        prologue, chunk = self.prologue, self.prologue.chunk
        addresses = epilogue_writer(self.renderer, "addresses", prologue.addresses)
        along = "at_k" if chunk.along_k else "at_r"
        addresses.lines.insert(0, f"const int gg_r = at_r, gg_k = at_k, gg_q = {along}/{chunk.lanes};")
        partial = [addresses.names[prologue.names[f"gate{i}"]] for i, load in enumerate(chunk.loads) if load.partial]
        return addresses, partial

    def _vector(self, addresses: EpilogueWriter) -> list[str]:
        """A whole chunk of the prologue (lane0 ...): its inputs' vector loads, then each lane's value."""
        prologue, chunk = self.prologue, self.prologue.chunk
        values = epilogue_writer(self.renderer, "lanes", prologue.lanes)
        lines = []
        for i, load in enumerate(chunk.loads):
            dtype = load.index.dtype.base
            nbytes, buffer = chunk.lanes * dtype.itemsize, addresses.names[load.index.src[0]]
            address = f"(const unsigned char*)({buffer} + {addresses.names[prologue.names[f'index{i}']]})"
            gate = addresses.names[prologue.names[f"gate{i}"]] if f"gate{i}" in prologue.names else "true"
            for piece in range(-(-nbytes // 16)):
                at, size = f"{address} + {16 * piece}", min(16, nbytes)
                fetch = (f"*(const uint4*)({at})" if size == 16 else f"gg_load8({at})") if load.aligned else \
                    f"gg_loadu({at}, {size})"  # fmt: skip
                lines.append(f"const uint4 {load.name}_w{piece} = {gate} ? {fetch} : make_uint4(0u, 0u, 0u, 0u);")
            for j in range(chunk.lanes):
                byte = j * dtype.itemsize
                word = f"{load.name}_w{byte // 16}.{'xyzw'[byte % 16 // 4]}"
                lane = (
                    f"(unsigned short)({word} >> {8 * (byte % 4)})"
                    if dtype.itemsize == 2
                    else f"__uint_as_float({word})"
                )
                lines.append(f"const {self.renderer.type_name(dtype)} {load.name}_{j} = {lane};")
        lanes = [values.names[prologue.names[f"value{j}"]] for j in range(chunk.lanes)]
        return [*lines, "{", *values.lines, *(f"  lane{j} = {x};" for j, x in enumerate(lanes)), "}"]

    def _pack(self, lanes: list[str]) -> str:
        if self.size == 4:
            return f"make_uint4({', '.join(f'__float_as_uint({x})' for x in lanes)})"
        return f"make_uint4({', '.join(f'{a} | (unsigned){b} << 16' for a, b in zip(lanes[::2], lanes[1::2]))})"

    def _store(self, stage: str, value: str) -> list[str]:
        base = f"p{self.name} + ({stage})*{self.layout.stage_bytes}"
        value = f"gg_tf32({value})" if self.tf32 else value
        if self.mode == "element":
            return [f"*({self.value_type}*)({base} + {self.layout.element_offset('r', 'kk')}) = {value};"]
        if self.contiguous_k == self.layout.k_major:  # the chunk is one chunk of a line
            return [f"*(uint4*)({base} + {self._chunk_offset()}) = {value};"]
        lines, words = [], ("x", "y", "z", "w")  # each element to its own line
        for e in range(self.chunk):
            row, k = ("r", f"kk + {e}") if self.contiguous_k else (f"r + {e}", "kk")
            if self.size == 2:
                element = f"(unsigned short)({value}.{words[e // 2]} >> {16 * (e % 2)})"
                lines.append(f"*(unsigned short*)({base} + {self.layout.element_offset(row, k)}) = {element};")
            else:
                lines.append(f"*(unsigned*)({base} + {self.layout.element_offset(row, k)}) = {value}.{words[e]};")
        return lines


class EpilogueWriter(CKernelWriter):
    """The C writer of a prologue or the epilogue; its SPECIAL variables are the kernel's own (the accumulator and its
    position, an operand's position). `value` names the program's last UOp (an operand's value)."""

    def dialect_handlers(self) -> dict:
        return {Ops.SPECIAL: self.special}

    def special(self, u: UOp) -> None:
        self.names[u] = u.arg[0]

    @property
    def value(self) -> str:
        return self.names[self.program[-1]]


def epilogue_writer(renderer: CStyleRenderer, name: str, program: list[UOp]) -> EpilogueWriter:
    """A loop-free program written once: its lines and the kernel's parameters."""
    writer = EpilogueWriter(renderer, program)
    writer.write(name)
    return writer


def batch_indices(batch_shape: tuple[int, ...], itype: str) -> list[str]:
    """The index along each batch axis (gg_batch0, ...) of the flat batch entry gg_batch, as the epilogue reads them."""
    lines, inner = [], 1
    for i, size in reversed(list(enumerate(batch_shape))):
        lines.insert(0, f"const {itype} gg_batch{i} = (gg_batch/{inner})%{size};")
        inner *= size
    return lines


def tile_lines(mm: Matmul, bm: int, bn: int, itype: str) -> list[str]:
    """Statements choosing this block's output tile (tile_m, tile_n, gg_batch)."""
    tiles_m, tiles_n = -(-mm.m // bm), -(-mm.n // bn)
    return [
        f"// this block's tile: blocks take the batch entries in turn, and in each the tiles {GROUP_M} rows at a time",
        f"int tile = blockIdx.x; const {itype} gg_batch = tile/{tiles_m * tiles_n}; tile %= {tiles_m * tiles_n};",
        f"const int group = tile/{GROUP_M * tiles_n}, first_m = group*{GROUP_M};",
        f"const int group_rows = min({tiles_m} - first_m, {GROUP_M}), in_group = tile%{GROUP_M * tiles_n};",
        "const int tile_m = first_m + in_group%group_rows, tile_n = in_group/group_rows;",
        *batch_indices(mm.batch_shape, itype),
    ]


def origin_lines(renderer: CStyleRenderer, mm: Matmul, writer: CKernelWriter, copies: tuple[OperandCopy, ...]
                 ) -> list[str]:  # fmt: skip
    """The strided operands' origins g<name>: their block's tile at k = 0."""
    lines = []
    for copy in copies:
        if (strided := copy.operand.strided) is not None and copy.mode != "element":
            buffer = writer.names[strided.buffer]
            kind = renderer.type_name(strided.buffer.dtype.base)
            origin = strided_origin(strided, mm.batch_shape, copy.row0, buffer)
            lines.append(f"const {kind}* g{copy.name} = {origin};")
    return lines


def shared_lines(copies: tuple[OperandCopy, ...], offsets: tuple[str, ...], pointers: bool = False) -> list[str]:
    """Each operand's shared tiles at the given byte offsets: s<name> (the address), and p<name> (a pointer) where
    the copy stores through registers or the kernel reads it so (`pointers`)."""
    lines = ["const unsigned gg_shared_at = gg_smem(gg_shared);"]
    for copy, offset in zip(copies, offsets):
        lines.append(f"const unsigned s{copy.name} = gg_shared_at + {offset};")
        if pointers or copy.mode != "async":
            lines.append(f"unsigned char* p{copy.name} = gg_shared + {offset};")
    return lines


def accumulator_lines(writer: CKernelWriter, mm: Matmul, itype: str, row: str, col: str, acc: str, bm: int,
                      bn: int) -> list[str]:  # fmt: skip
    """The epilogue of one accumulator `acc` at output row `row`, column `col` (C expressions), inside the output (a
    test only where bm x bn tiles run past it)."""
    inside = " && ".join([f"gg_row < {mm.m}"] * (mm.m % bm != 0) + [f"gg_col < {mm.n}"] * (mm.n % bn != 0)) or "true"
    return [f"const {itype} gg_row = {row}, gg_col = {col};", f"if ({inside}) {{",
            f"  const float gg_acc = {acc};", *("  " + line for line in writer.lines), "}"]  # fmt: skip


def kernel_source(renderer: CStyleRenderer, writer: CKernelWriter, epilogue: list[UOp], operands: tuple[Prologue, ...],
                  name: str, threads: int, blocks_per_sm: int, shared_bytes: int, helpers: list[str], body: list[str]
                  ) -> str:  # fmt: skip
    """The whole source: the prelude, the helpers, the shared-memory size the runtime reads, the kernel."""
    kernel = [
        f'extern "C" __device__ unsigned int gg_dynamic_shared_bytes = {shared_bytes};  // read by the runtime',
        f'extern "C" __global__ void __launch_bounds__({threads}, {blocks_per_sm}) {name}({", ".join(writer.params)}) {{',  # noqa: E501
        "extern __shared__ __align__(128) unsigned char gg_shared[];",
        *("  " + line for line in body),
        "}",
    ]
    every = epilogue + [u for p in operands for program in (p.element, p.addresses, p.lanes) for u in program]
    return "\n".join(renderer.prelude(every) + COPY_HELPERS + helpers + kernel) + "\n"  # type: ignore[attr-defined]


def operand_copies(renderer: CStyleRenderer, mm: Matmul, operands: tuple[Prologue, Prologue],
                   layouts: tuple[TileLayout, TileLayout], threads: int, registers: int, tf32: bool = False
                   ) -> tuple[OperandCopy, OperandCopy]:  # fmt: skip
    """A's and B's copies into their layouts (A's tile starts at row tile_m*bm, B's at tile_n*bn); `registers`: what
    the kernel leaves a thread for the copies staged through registers (A takes its share first); `tf32`: rounded
    to TF32 on their way."""
    value_type, copies = renderer.type_name(mm.dtype), []
    for n, op, layout, prologue in zip("AB", (mm.a, mm.b), layouts, operands):
        row0 = f"tile_{'m' if n == 'A' else 'n'}*{layout.rows}"
        copy = OperandCopy(renderer, n, op, prologue, layout, threads, mm.k, value_type, row0, registers, tf32)
        registers -= copy.words if copy.staged else 0
        copies.append(copy)
    return copies[0], copies[1]


def register_room(threads: int, blocks_per_sm: int, held: int) -> int:
    """Registers a thread has for staged copies: what the launch bounds allow it (the multiprocessor's 65536 shared
    among the blocks' threads, at most 255), less what the kernel holds otherwise (`held`) and its index math."""
    return min(255, 65536 // (threads * blocks_per_sm)) - held - INDEX_REGISTERS


def pipeline_start(copies: tuple[OperandCopy, ...], stages: int) -> list[str]:
    """The first stages-1 steps' copies, before any math (register copies store at once)."""
    body = [line for c in copies for line in c.prefetch("s")] + [line for c in copies for line in c.commit("s", "s")]
    return [
        "#pragma unroll",
        f"for (int s = 0; s < {stages - 1}; s++) {{  // the first {stages - 1} steps' copies go out before any math",
        "  if (s < steps) {",
        *("    " + line for line in body),
        "  }",
        "  gg_cp_async_commit();",
        "}",
    ]
