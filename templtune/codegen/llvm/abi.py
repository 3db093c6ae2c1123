"""The interface between generated code and the runtime.

:class:`KernelStatus`, :class:`ParamInfo` and :class:`RenderedModule` say what a rendered kernel
takes and returns; ``_timer`` and ``_FLUSH`` render the two helper functions the runtime calls
(the native timing loop and the cache flush). Kept apart from the statement renderer: none of it
depends on loop-IR statements, and the runtime needs only these names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from templtune.codegen.llvm import types as T
from templtune.errors import CodegenError

if TYPE_CHECKING:
    from templtune.lower.ir import PrimFunc
    from templtune.te.expr import Var


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


class ParallelRuntime(enum.Enum):
    """What runs a kernel's ``parallel`` loops (recorded in its header as ``"pool"``)."""

    #: rendered as serial loops (no thread library)
    SERIAL = "serial"
    #: templtune's own pool (:mod:`templtune.codegen.llvm.pool`)
    POOL = "templtune"
    #: libgomp's ``GOMP_parallel``
    GOMP = "gomp"


@dataclass(frozen=True, slots=True)
class RenderedModule:
    """The LLVM IR text of one PrimFunc plus what the runtime needs to call it."""

    ir: str
    entry: str
    params: tuple[ParamInfo, ...]
    shape_vars: tuple[tuple[str, str], ...]  # (name, dtype) of the trailing scalar arguments
    parallel: bool
    runtime: ParallelRuntime = ParallelRuntime.SERIAL

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
