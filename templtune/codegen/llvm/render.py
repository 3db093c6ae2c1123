"""Loop IR (:class:`~templtune.lower.ir.PrimFunc`) -> LLVM IR text.

The module holds:

* the kernel ``i32 @"<name>"(ptr noalias %A, ..., i32 %n, ...)``: one pointer per buffer parameter,
  then one integer per symbolic shape variable (taken from the arrays' shapes at call time); it
  returns a :class:`KernelStatus` (0 on success) that the runtime turns into an exception;
* one internal function per ``parallel`` loop, run by ``GOMP_parallel`` (libgomp's persistent pool),
  its threads claiming chunks of iterations from a shared counter;
* ``@"<name>.__timer"(ptr args, i64 number) -> double``: calls the kernel ``number`` times between
  two ``clock_gettime(CLOCK_MONOTONIC)`` so timing loops run in native code (a failed call stops
  the loop and returns minus its status);
* ``@"<name>.__nthreads"``: the thread count for parallel loops, set by the runtime at load time.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from templtune import dtype as dt
from templtune.codegen.llvm import types as T
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
    PrimFunc,
    SeqStmt,
    Stmt,
    Store,
)
from templtune.te.dispatch import handles
from templtune.te.expr import IntImm, Var

log = logging.getLogger("templtune.codegen.llvm")

# NOTE: local buffers up to this size live on the stack (entry-block alloca, so a loop does not
# grow the stack); bigger or dynamically sized ones are heap-allocated around their scope. Worker
# threads of libgomp have smaller stacks than the main thread, hence the modest limit.
STACK_LIMIT_BYTES = 128 * 1024
_ALIGN = 64
#: chunks of a parallel loop per thread (see :meth:`_Fn.parallel_for`)
_CHUNKS_PER_THREAD = 8


class KernelStatus(enum.IntEnum):
    """What a generated kernel returns."""

    OK = 0
    ALLOC_FAILED = 1  # a heap scratch buffer could not be allocated (aligned_alloc gave NULL)


@dataclass(frozen=True, slots=True)
class ParamInfo:
    """One kernel argument: a buffer with its shape (ints, or names of shape variables)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True, slots=True)
class RenderedModule:
    """The LLVM IR text of one PrimFunc plus what the runtime needs to call it."""

    ir: str
    entry: str
    params: tuple[ParamInfo, ...]
    shape_vars: tuple[tuple[str, str], ...]  # (name, dtype) of the trailing scalar arguments
    parallel: bool

    @property
    def timer(self) -> str:
        return f"{self.entry}.__timer"

    @property
    def nthreads_global(self) -> str:
        return f"{self.entry}.__nthreads"


def _quote(name: str) -> str:
    if '"' in name or "\\" in name or not name:
        raise CodegenError(f"function name {name!r} cannot be used as a symbol")
    return f'@"{name}"'


class _Module:
    """Module-level state while rendering: declarations, extra functions, metadata."""

    def __init__(self, entry: str, use_gomp: bool) -> None:
        self.entry = entry
        self.use_gomp = use_gomp
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


class _Fn(MemoryRenderer):
    """Renders the statements of one LLVM function."""

    def __init__(self, mod: _Module, header: str, in_parallel: bool,
                 parent: _Fn | None = None) -> None:
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
        if s.kind is ForKind.PARALLEL and not self.in_parallel and self.mod.use_gomp:
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
            props = ['!"llvm.loop.vectorize.enable", i1 true']
            if isinstance(s.extent, IntImm):
                props.append(f'!"llvm.loop.vectorize.width", i32 {s.extent.value}')
            md = self.mod.loop_md(props)
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

    # -------------------------------------------------------------------------- parallel
    def parallel_for(self, s: For) -> None:
        """Outline the loop body into a function and run it on libgomp's thread pool; the
        threads take chunks of iterations from a shared counter (dynamic schedule).

        The body is rendered first, into a function whose parameters are created on demand:
        a variable or buffer the body uses from the enclosing function becomes a capture. The
        captures then fill a context struct passed through ``GOMP_parallel``."""
        self.mod.parallel = True
        ivd = _iv_dtype(s.loop_var)
        ty = T.ll_type(ivd)
        lo = self.cast_to(self.expr(s.min), ivd)
        ext = self.cast_to(self.expr(s.extent), ivd)
        k = self.mod.n_par
        self.mod.n_par += 1
        fname = _quote(f"{self.mod.entry}.par{k}")
        body_name = _quote(f"{self.mod.entry}.par{k}.body")
        # NOTE: a static split makes the slowest thread set the time: on a shared machine a
        # thread whose core is busy (another process, a peer library's spinning workers) holds
        # the others up, and 2 threads can run slower than 1. Chunks claimed from a counter let
        # the free thread take the work; several chunks per thread bound the imbalance.
        counter = self.entry_alloca(ty, 8)
        self.emit(f"store {ty} 0, ptr {counter}")
        sub = _Fn(self.mod, "", True, parent=self)
        sub.captures = [(lo[0], ty), (ext[0], ty), (counter, "ptr")]
        sub.declare("declare i32 @omp_get_num_threads()")
        nt = sub.cast_to((sub.op("call i32 @omp_get_num_threads()"), "int32"), ivd)[0]
        lo_s, ext_s, cnt_s = "%c0", "%c1", "%c2"
        per = sub.op(f"mul {ty} {nt}, {_CHUNKS_PER_THREAD}")
        t1 = sub.op(f"add {ty} {ext_s}, {per}")
        t2 = sub.op(f"sub {ty} {t1}, 1")
        chunk = sub.op(f"sdiv {ty} {t2}, {per}")
        full_end = sub.op(f"add {ty} {lo_s}, {ext_s}")
        sub.declare(f"declare {ty} @llvm.smin.{T.suffix(ivd)}({ty}, {ty})")
        grab, run, done = sub.new_label("par_grab"), sub.new_label("par_run"), \
            sub.new_label("par_done")
        sub.emit(f"br label %{grab}")
        sub.start_block(grab)
        off = sub.op(f"atomicrmw add ptr {cnt_s}, {ty} {chunk} monotonic")
        more = sub.op(f"icmp slt {ty} {off}, {ext_s}")
        sub.emit(f"br i1 {more}, label %{run}, label %{done}")
        sub.start_block(run)
        begin = sub.op(f"add {ty} {lo_s}, {off}")
        e1 = sub.op(f"add {ty} {begin}, {chunk}")
        end = sub.op(f"call {ty} @llvm.smin.{T.suffix(ivd)}({ty} {e1}, {ty} {full_end})")
        sub.serial_loop(s.loop_var, begin, end, s.body, None, nonempty=True)
        sub.emit(f"br label %{grab}")
        sub.start_block(done)
        sub.emit("ret void")
        caps = sub.captures
        # NOTE: pointer parameters of the body are ``noalias`` (as the kernel's are); values
        # loaded from the context struct would lose that and block register promotion.
        # The counter (%c2) is shared between the threads, hence not ``noalias``.
        params = ", ".join(f"{t}{' noalias' if t == 'ptr' and i != 2 else ''} %c{i}"
                           for i, (_, t) in enumerate(caps))
        sub.header = f"define internal void {body_name}({params}) #0 {{"
        self.mod.functions.append(sub.text())

        sty = "{" + ", ".join(t for _, t in caps) + "}"
        ctx = self.entry_alloca(sty, 16)
        for i, (val, t) in enumerate(caps):
            p = self.op(f"getelementptr inbounds {sty}, ptr {ctx}, i32 0, i32 {i}")
            self.emit(f"store {t} {val}, ptr {p}")
        nth = self.op(f"load i32, ptr {_quote(self.mod.entry + '.__nthreads')}")
        self.declare("declare void @GOMP_parallel(ptr, ptr, i32, i32)")
        self.emit(f"call void @GOMP_parallel(ptr {fname}, ptr {ctx}, i32 {nth}, i32 0)")
        wrap = [f"define internal void {fname}(ptr noalias %ctx) #0 {{", "entry:"]
        for i, (_, t) in enumerate(caps):
            wrap.append(f"  %p{i} = getelementptr inbounds {sty}, ptr %ctx, i32 0, i32 {i}")
            wrap.append(f"  %v{i} = load {t}, ptr %p{i}")
        wrap.append(f"  call void {body_name}("
                    + ", ".join(f"{t} %v{i}" for i, (_, t) in enumerate(caps)) + ")")
        wrap += ["  ret void", "}"]
        self.mod.functions.append("\n".join(wrap))

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


def _shape_info(func: PrimFunc) -> tuple[tuple[ParamInfo, ...], list[Var]]:
    params, svars = [], []
    for b in func.params:
        shape: list[int | str | None] = []
        for d in b.shape:
            if isinstance(d, IntImm):
                shape.append(d.value)
            elif isinstance(d, Var):
                if d not in svars:
                    svars.append(d)
                shape.append(d.name)
            else:
                shape.append(None)  # a compound symbolic extent: not checked at call time
        params.append(ParamInfo(b.name, b.dtype, tuple(shape)))
    return tuple(params), svars


def render(func: PrimFunc, *, name: str | None = None, use_gomp: bool = True,
           num_threads: int = 0, x86: bool = True) -> RenderedModule:
    """Render ``func`` (named ``name`` or ``func.name``) to an LLVM module.

    ``num_threads`` initialises the thread-count global (0: the runtime picks at load time);
    ``use_gomp`` false renders parallel loops serially (libgomp unavailable).
    """
    entry = name or func.name
    mod = _Module(entry, use_gomp)
    params, svars = _shape_info(func)
    args = [f"ptr noalias %arg{i}" for i in range(len(func.params))]
    args += [f"{T.ll_type(v.dtype)} %sv{i}" for i, v in enumerate(svars)]
    fn = _Fn(mod, f"define i32 {_quote(entry)}({', '.join(args)}) #0 {{", False)
    for i, b in enumerate(func.params):
        fn.bind_buffer(b, f"%arg{i}")
    for i, v in enumerate(svars):
        fn.env[v] = (f"%sv{i}", v.dtype)
    fn.stmt(func.body)
    fn.ret_status()
    ir = [f"; templtune module for {entry}",
          f"{_quote(entry + '.__nthreads')} = global i32 {int(num_threads)}",
          f"{_quote(entry + '.__fp')} = internal global ptr {_quote(entry)}",
          fn.text(), *mod.functions, _timer(entry, func, svars)]
    if x86:
        ir.append(_FLUSH)
    mod.declares["declare i32 @clock_gettime(i32, ptr)"] = None
    ir += list(mod.declares)
    ir.append('attributes #0 = { nounwind "frame-pointer"="none" }')
    ir += mod.metadata
    return RenderedModule("\n".join(ir) + "\n", entry, params,
                          tuple((v.name, v.dtype) for v in svars), mod.parallel)


def _timer(entry: str, func: PrimFunc, svars: list[Var]) -> str:
    """``double timer(ptr args, i64 number)``: args is an array of 8-byte slots (pointers, then
    shape variables as i64); returns seconds, or minus the status of a failed kernel call. The kernel is called through a volatile-loaded pointer so that the
    optimiser can neither inline it nor drop the repeated calls."""
    lines = [f"define double {_quote(entry + '.__timer')}(ptr %args, i64 %number) {{", "entry:",
             "  %ts0 = alloca { i64, i64 }, align 8", "  %ts1 = alloca { i64, i64 }, align 8"]
    call_args = []
    for i in range(len(func.params)):
        lines.append(f"  %p{i} = getelementptr ptr, ptr %args, i64 {i}")
        lines.append(f"  %a{i} = load ptr, ptr %p{i}")
        call_args.append(f"ptr %a{i}")
    for j, v in enumerate(svars):
        i = len(func.params) + j
        ty = T.ll_type(v.dtype)
        lines.append(f"  %p{i} = getelementptr i64, ptr %args, i64 {i}")
        lines.append(f"  %w{i} = load i64, ptr %p{i}")
        lines.append(f"  %a{i} = " + (f"trunc i64 %w{i} to {ty}" if ty != "i64" else f"add i64 %w{i}, 0"))
        call_args.append(f"{ty} %a{i}")
    lines += [
        "  call i32 @clock_gettime(i32 1, ptr %ts0)",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %next]",
        f"  %fp = load volatile ptr, ptr {_quote(entry + '.__fp')}",
        f"  %st = call i32 %fp({', '.join(call_args)})",
        "  %bad = icmp ne i32 %st, 0",
        "  br i1 %bad, label %fail, label %next",
        "next:",
        "  %i1 = add i64 %i, 1",
        "  %c = icmp slt i64 %i1, %number",
        "  br i1 %c, label %loop, label %done",
        "fail:",
        "  %stf = sitofp i32 %st to double",
        "  %neg = fneg double %stf",
        "  ret double %neg",
        "done:",
        "  call i32 @clock_gettime(i32 1, ptr %ts1)",
        "  %s0 = load i64, ptr %ts0", "  %s1 = load i64, ptr %ts1",
        "  %n0p = getelementptr { i64, i64 }, ptr %ts0, i32 0, i32 1",
        "  %n1p = getelementptr { i64, i64 }, ptr %ts1, i32 0, i32 1",
        "  %n0 = load i64, ptr %n0p", "  %n1 = load i64, ptr %n1p",
        "  %ds = sub i64 %s1, %s0", "  %dn = sub i64 %n1, %n0",
        "  %dsn = mul i64 %ds, 1000000000", "  %tot = add i64 %dsn, %dn",
        "  %f = sitofp i64 %tot to double", "  %r = fmul double %f, 1.0e-9",
        "  ret double %r", "}"]
    return "\n".join(lines)


# ``void __tt_flush(ptr p, i64 bytes)``: evict a buffer from every cache level (clflush + fence),
# used between timing repeats when cache flushing is requested.
_FLUSH = """declare void @llvm.x86.sse2.clflush(ptr)
define void @__tt_flush(ptr %p, i64 %bytes) {
entry:
  %c0 = icmp sgt i64 %bytes, 0
  br i1 %c0, label %loop, label %done
loop:
  %o = phi i64 [0, %entry], [%o1, %loop]
  %q = getelementptr i8, ptr %p, i64 %o
  call void @llvm.x86.sse2.clflush(ptr %q)
  %o1 = add i64 %o, 64
  %c = icmp slt i64 %o1, %bytes
  br i1 %c, label %loop, label %done
done:
  fence seq_cst
  ret void
}"""
