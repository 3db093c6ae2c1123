"""Loop IR (:class:`~templtune.lower.ir.PrimFunc`) -> LLVM IR text.

The module holds:

* the kernel ``i32 @"<name>"(ptr noalias %A, ..., i32 %n, ...)``: one pointer per buffer parameter,
  then one integer per symbolic shape variable (taken from the arrays' shapes at call time); it
  returns a :class:`KernelStatus` (0 on success) that the runtime turns into an exception;
* one internal function per ``parallel`` loop, run by templtune's thread pool
  (:mod:`.pool`, ``templtune_parallel_launch``) or libgomp's ``GOMP_parallel``, its threads
  claiming chunks of iterations from a shared counter;
* ``@"<name>.__timer"(ptr args, i64 number) -> double``: calls the kernel ``number`` times between
  two ``clock_gettime(CLOCK_MONOTONIC)`` so timing loops run in native code (a failed call stops
  the loop and returns minus its status);
* ``@"<name>.__nthreads"``: the thread count for parallel loops, set by the runtime at load time.

Here are the outlining of parallel loops and the assembly of the module; statements are rendered
by :mod:`.stmts` (over :mod:`.memory` and :mod:`.exprs`), and the names the runtime needs, with
the timer and cache-flush functions, are in :mod:`.abi`.
"""

from __future__ import annotations

import logging

from templtune.codegen.llvm import types as T
from templtune.codegen.llvm.abi import (  # noqa: F401  (re-exported)
    _FLUSH,
    KernelStatus,
    ParallelRuntime,
    ParamInfo,
    RenderedModule,
    _quote,
    _timer,
)
from templtune.codegen.llvm.pool import LAUNCH
from templtune.codegen.llvm.stmts import (  # noqa: F401  (re-exported)
    _ALIGN,
    STACK_LIMIT_BYTES,
    StmtRenderer,
    _iv_dtype,
    _Module,
)
from templtune.lower.ir import For, PrimFunc
from templtune.te.expr import IntImm, Var

log = logging.getLogger("templtune.codegen.llvm")

#: chunks of a parallel loop per thread (see :meth:`_Fn.parallel_for`)
_CHUNKS_PER_THREAD = 8


class _Fn(StmtRenderer):
    """Renders the statements of one LLVM function, ``parallel`` loops outlined onto a pool."""

    # -------------------------------------------------------------------------- parallel
    def parallel_for(self, s: For) -> None:
        """Outline the loop body into a function and run it on the module's thread pool; the
        threads take chunks of iterations from a shared counter (dynamic schedule), so the
        loop is complete whichever threads, however many, run the function.

        The body is rendered first, into a function whose parameters are created on demand:
        a variable or buffer the body uses from the enclosing function becomes a capture. The
        captures then fill a context struct passed through the pool's launch."""
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
        nth = self.op(f"load i32, ptr {_quote(self.mod.entry + '.__nthreads')}")
        self.declare("declare i32 @llvm.smax.i32(i32, i32)")
        nth = self.op(f"call i32 @llvm.smax.i32(i32 {nth}, i32 1)")
        sub = _Fn(self.mod, "", True, parent=self)
        sub.captures = [(lo[0], ty), (ext[0], ty), (counter, "ptr"),
                        (self.cast_to((nth, "int32"), ivd)[0], ty)]
        lo_s, ext_s, cnt_s, nt = "%c0", "%c1", "%c2", "%c3"
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
        if self.mod.runtime is ParallelRuntime.GOMP:
            self.declare("declare void @GOMP_parallel(ptr, ptr, i32, i32)")
            self.emit(f"call void @GOMP_parallel(ptr {fname}, ptr {ctx}, i32 {nth}, i32 0)")
        else:
            self.declare(f"declare void @{LAUNCH}(ptr, ptr, i32)")
            self.emit(f"call void @{LAUNCH}(ptr {fname}, ptr {ctx}, i32 {nth})")
        wrap = [f"define internal void {fname}(ptr noalias %ctx) #0 {{", "entry:"]
        for i, (_, t) in enumerate(caps):
            wrap.append(f"  %p{i} = getelementptr inbounds {sty}, ptr %ctx, i32 0, i32 {i}")
            wrap.append(f"  %v{i} = load {t}, ptr %p{i}")
        wrap.append(f"  call void {body_name}("
                    + ", ".join(f"{t} %v{i}" for i, (_, t) in enumerate(caps)) + ")")
        wrap += ["  ret void", "}"]
        self.mod.functions.append("\n".join(wrap))


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


def render(func: PrimFunc, *, name: str | None = None,
           runtime: ParallelRuntime = ParallelRuntime.POOL, num_threads: int = 0,
           x86: bool = True) -> RenderedModule:
    """Render ``func`` (named ``name`` or ``func.name``) to an LLVM module.

    ``num_threads`` initialises the thread-count global (0: the runtime picks at load time);
    ``runtime`` says what runs parallel loops (``SERIAL`` renders them as serial loops).
    """
    entry = name or func.name
    mod = _Module(entry, runtime)
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
                          tuple((v.name, v.dtype) for v in svars), mod.parallel,
                          runtime if mod.parallel else ParallelRuntime.SERIAL)
