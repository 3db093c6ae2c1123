"""Statements of the LLVM function renderer: emission primitives, buffers, control flow, loops.

:class:`StmtRenderer` is the layer over :class:`~.memory.MemoryRenderer` that renders one
function's statements; :class:`_Module` is the module-level state its functions share. Outlining
a ``parallel`` loop into functions of its own, and assembling the module, stay in :mod:`.render`.
"""

from __future__ import annotations

from templtune import dtype as dt
from templtune.codegen.llvm import types as T
from templtune.codegen.llvm.abi import KernelStatus, ParallelRuntime
from templtune.codegen.llvm.exprs import V
from templtune.codegen.llvm.memory import MemoryRenderer
from templtune.errors import CodegenError
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    Store,
)
from templtune.te.dispatch import handles
from templtune.te.expr import IntImm, Var

# NOTE: local buffers up to this size live on the stack (entry-block alloca, so a loop does not
# grow the stack); bigger or dynamically sized ones are heap-allocated around their scope. Worker
# threads may have smaller stacks than the main thread (libgomp's), hence the modest limit.
STACK_LIMIT_BYTES = 128 * 1024
_ALIGN = 64


class _Module:
    """Module-level state while rendering: declarations, extra functions, metadata."""

    def __init__(self, entry: str, runtime: ParallelRuntime) -> None:
        self.entry = entry
        self.runtime = runtime
        self.declares: dict[str, None] = {}
        self.functions: list[str] = []
        self.metadata: list[str] = []
        self.n_md = 0
        self.n_par = 0
        self.parallel = False

    def loop_md(self, props: list[str]) -> str:
        ids = []
        for p in props:
            ids.append(f"!{self.n_md}")
            self.metadata.append(f"!{self.n_md} = !{{{p}}}")
            self.n_md += 1
        me = f"!{self.n_md}"
        self.n_md += 1
        self.metadata.append(f"{me} = distinct !{{{', '.join([me] + ids)}}}")
        return me


class StmtRenderer(MemoryRenderer):
    """Renders the statements of one LLVM function; a function nested in ``parent`` (the body
    of a parallel loop) captures the parent's values it uses. The subclass provides
    :meth:`parallel_for`."""

    def __init__(self, mod: _Module, header: str, in_parallel: bool,
                 parent: StmtRenderer | None = None) -> None:
        self.mod = mod
        self.parent = parent
        self.captures: list[tuple[str, str]] = []
        self.header = header
        self.in_parallel = in_parallel
        self.entry_lines: list[str] = []
        self.lines: list[str] = []
        self.n = 0
        self.labels: dict[str, int] = {}
        self.cse = {}
        self.cur_block = "entry"
        self.env: dict[Var, V] = {}
        self.bufs: dict[Var, str] = {}
        self.buf_names: dict[str, str | None] = {}
        self._status: str | None = None

    # ---------------------------------------------------------------- emission primitives
    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def new_label(self, hint: str) -> str:
        k = self.labels.get(hint, 0)
        self.labels[hint] = k + 1
        return f"{hint}{k}"

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.cur_block = label
        self.cse = {}

    def declare(self, line: str) -> None:
        self.mod.declares[line] = None

    def entry_alloca(self, ty: str, align: int, count: int = 1) -> str:
        t = self.tmp()
        n = f", i64 {count}" if count != 1 else ""
        self.entry_lines.append(f"  {t} = alloca {ty}{n}, align {align}")
        return t

    def text(self) -> str:
        return "\n".join([self.header, "entry:", *self.entry_lines, *self.lines, "}"])

    def status_ptr(self) -> str:
        """Pointer to the kernel's i32 status slot, created on first use; a parallel body
        captures the kernel's slot."""
        if self._status is None:
            if self.parent is None:
                self._status = self.entry_alloca("i32", 4)
                self.entry_lines.append(f"  store i32 {KernelStatus.OK}, ptr {self._status}")
            else:
                self._status = self._capture(self.parent.status_ptr(), "ptr")
        return self._status

    def ret_status(self) -> None:
        """End the kernel: return its status (constant 0 when nothing can fail)."""
        if self._status is None:
            self.emit(f"ret i32 {KernelStatus.OK}")
        else:
            self.emit(f"ret i32 {self.op(f'load i32, ptr {self._status}')}")

    # ------------------------------------------------------------------------- buffers
    def bind_buffer(self, buf: Buffer, ptr: str) -> None:
        self.bufs[buf.data] = ptr
        # a second Buffer object for the same name is accepted only when the name is unique
        self.buf_names[buf.name] = None if buf.name in self.buf_names else ptr

    def lookup_buffer(self, buf: Buffer) -> str | None:
        p = self.bufs.get(buf.data)
        if p is None:
            p = self.buf_names.get(buf.name)
        if p is None and self.parent is not None:
            pp = self.parent.lookup_buffer(buf)
            if pp is not None:
                p = self._capture(pp, "ptr")
                self.bind_buffer(buf, p)
        return p

    def buffer_ptr(self, buf: Buffer) -> str:
        p = self.lookup_buffer(buf)
        if p is None:
            raise CodegenError(f"buffer {buf.name!r} is used but neither a parameter nor allocated")
        return p

    # ------------------------------------------------------------------------ statements
    def stmt(self, s: Stmt) -> None:
        self._tables["stmt"](self, s)

    @handles(SeqStmt, table="stmt")
    def stmt_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    @handles(AttrStmt, table="stmt")
    def stmt_AttrStmt(self, s: AttrStmt) -> None:
        self.stmt(s.body)

    @handles(Evaluate, table="stmt")
    def stmt_Evaluate(self, s: Evaluate) -> None:
        self.expr(s.value)

    @handles(Store, table="stmt")
    def stmt_Store(self, s: Store) -> None:
        self.store(s.buffer, s.index, s.value, s.predicate)

    @handles(LetStmt, table="stmt")
    def stmt_LetStmt(self, s: LetStmt) -> None:
        self.env[s.var] = self.expr(s.value)
        self.stmt(s.body)
        del self.env[s.var]

    @handles(IfThenElse, table="stmt")
    def stmt_IfThenElse(self, s: IfThenElse) -> None:
        c = self.as_bool(s.condition)
        lt, lj = self.new_label("then"), self.new_label("endif")
        lf = self.new_label("else") if s.else_case is not None else lj
        self.emit(f"br i1 {c}, label %{lt}, label %{lf}")
        self.start_block(lt)
        self.stmt(s.then_case)
        self.emit(f"br label %{lj}")
        if s.else_case is not None:
            self.start_block(lf)
            self.stmt(s.else_case)
            self.emit(f"br label %{lj}")
        self.start_block(lj)

    @handles(Allocate, table="stmt")
    def stmt_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        elem = dt.element_of(buf.dtype)
        ety, esize = T.mem_type(elem), dt.itemsize(elem) // dt.lanes(elem)
        count: int | None = 1
        for d in buf.shape:
            count = count * d.value if (isinstance(d, IntImm) and count is not None) else None
        if count is not None and count * esize <= STACK_LIMIT_BYTES:
            ptr = self.entry_alloca(ety, _ALIGN, max(count, 1))
            self.bind_buffer(buf, ptr)
            self.stmt(s.body)
            return
        size: str
        if count is not None:
            size = str(-(-count * esize // _ALIGN) * _ALIGN)
        else:
            n: V = ("1", "int64")
            for d in buf.shape:
                x = self.cast_to(self.expr(d), "int64")
                n = (self.op(f"mul i64 {n[0]}, {x[0]}"), "int64")
            nbytes = self.op(f"mul i64 {n[0]}, {esize}")
            # round up to the alignment (aligned_alloc needs a multiple) and never ask for zero
            padded = self.op(f"add i64 {nbytes}, {_ALIGN}")
            size = self.op(f"and i64 {padded}, {-_ALIGN}")
        self.declare("declare noalias ptr @aligned_alloc(i64, i64)")
        self.declare("declare void @free(ptr)")
        ptr = self.op(f"call ptr @aligned_alloc(i64 {_ALIGN}, i64 {size})")
        # NOTE: a failed allocation skips the buffer's scope (nothing outside it can use the
        # buffer) and marks the kernel failed; atomic, since parallel threads may all fail.
        status = self.status_ptr()
        isnull = self.op(f"icmp eq ptr {ptr}, null")
        l_fail, l_ok = self.new_label("alloc_fail"), self.new_label("alloc_ok")
        l_end = self.new_label("alloc_end")
        self.emit(f"br i1 {isnull}, label %{l_fail}, label %{l_ok}")
        self.start_block(l_fail)
        self.emit(f"store atomic i32 {KernelStatus.ALLOC_FAILED}, ptr {status} monotonic, align 4")
        self.emit(f"br label %{l_end}")
        self.start_block(l_ok)
        self.bind_buffer(buf, ptr)
        self.stmt(s.body)
        self.emit(f"call void @free(ptr {ptr})")
        self.emit(f"br label %{l_end}")
        self.start_block(l_end)

    @handles(For, table="stmt")
    def stmt_For(self, s: For) -> None:
        if s.kind is ForKind.THREAD_BINDING:
            raise CodegenError(f"loop {s.loop_var.name} is bound to {s.thread_tag!r}; thread "
                               "bindings need a cuda target, not llvm")
        if (s.kind is ForKind.PARALLEL and not self.in_parallel
                and self.mod.runtime is not ParallelRuntime.SERIAL):
            self.parallel_for(s)
            return
        ivd = _iv_dtype(s.loop_var)
        lo = self.cast_to(self.expr(s.min), ivd)
        ext = self.cast_to(self.expr(s.extent), ivd)
        ty = T.ll_type(ivd)
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            if s.extent.value <= 0:
                return
            end = str(s.min.value + s.extent.value)
        else:
            end = self.op(f"add nsw {ty} {lo[0]}, {ext[0]}")
        md = None
        if s.kind is ForKind.UNROLLED:
            md = self.mod.loop_md(['!"llvm.loop.unroll.full"'])
        elif s.kind is ForKind.VECTORIZED:
            # NOTE: a loop lowering could not vectorize (lower.vectorize): LLVM's vectorizer picks
            # the width; forcing the loop's extent made interleaved stores slower
            md = self.mod.loop_md(['!"llvm.loop.vectorize.enable", i1 true'])
        self.serial_loop(s.loop_var, lo[0], end, s.body, md)

    def serial_loop(self, var: Var, lo: str, end: str, body: Stmt, md: str | None,
                    nonempty: bool = False) -> None:
        """``for var in [lo, end)`` in rotated form (guard, body, latch test at the bottom),
        the shape LLVM's loop passes want, so LoopRotate has nothing to do."""
        ivd = _iv_dtype(var)
        ty = T.ll_type(ivd)
        lb, lx = self.new_label("for_body"), self.new_label("for_end")
        const_trip = lo.lstrip("-").isdigit() and end.lstrip("-").isdigit()
        if const_trip and int(end) <= int(lo):
            return
        if not (const_trip or nonempty):
            g = self.op(f"icmp slt {ty} {lo}, {end}")
            self.emit(f"br i1 {g}, label %{lb}, label %{lx}")
        else:
            self.emit(f"br label %{lb}")
        pre = self.cur_block
        self.start_block(lb)
        iv = self.tmp()
        phi_at = len(self.lines)
        self.lines.append("")  # patched below, once the latch block is known
        self.env[var] = (iv, ivd)
        self.stmt(body)
        del self.env[var]
        nxt = self.op(f"add nsw {ty} {iv}, 1")
        c = self.op(f"icmp slt {ty} {nxt}, {end}")
        latch = self.cur_block
        self.emit(f"br i1 {c}, label %{lb}, label %{lx}" + (f", !llvm.loop {md}" if md else ""))
        self.lines[phi_at] = f"  {iv} = phi {ty} [{lo}, %{pre}], [{nxt}, %{latch}]"
        self.start_block(lx)

    def parallel_for(self, s: For) -> None:
        """Run the loop ``s`` on the thread pool (see :meth:`.render._Fn.parallel_for`)."""
        raise NotImplementedError  # pragma: no cover

    # -------------------------------------------------------------------------- captures
    def _capture(self, value: str, ty: str) -> str:
        self.captures.append((value, ty))
        return f"%c{len(self.captures) - 1}"

    @handles(Var, table="expr")
    def expr_Var(self, e: Var) -> V:
        v = self.env.get(e)
        if v is None and self.parent is not None:
            pv = self.parent.env.get(e)
            if pv is None:
                pv = self.parent.expr_Var(e)  # raises for a free variable
            v = (self._capture(pv[0], T.ll_type(pv[1])), pv[1])
            self.env[e] = v
        if v is None:
            return super().expr_Var(e)
        return v


def _iv_dtype(var: Var) -> str:
    """The LLVM-side dtype of a loop variable. NOTE: int32 loop variables become 64-bit, so
    address arithmetic needs no sign extension (which costs IndVarSimplify heavily); index
    arithmetic widens with them, and values are truncated back where stored as int32."""
    return "int64" if var.dtype == "int32" else var.dtype
