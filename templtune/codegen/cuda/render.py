"""Render kernels (see :mod:`templtune.codegen.cuda.kernel`) as CUDA C.

The output reads like hand-written CUDA: one ``extern "C" __global__`` function per kernel with
``__launch_bounds__``, ``__restrict__`` pointer arguments, shared and local arrays declared at the
top, ``((int)threadIdx.x)`` for thread indices, ``#pragma unroll`` on unrolled loops and
``float2``/``float4`` accesses for aligned contiguous copies. Vector statements that cannot be
a single aligned vector access are scalarized into an unrolled lane loop first
(:mod:`templtune.codegen.cuda.scalarize`); C types and literals are spelled by
:mod:`templtune.codegen.cuda.csyntax`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from templtune import dtype as dt
from templtune.codegen.cuda.analysis import buffer_size, is_nonneg
from templtune.codegen.cuda.csyntax import (
    _HELPERS,
    _INFIX,
    _MATH,
    _RESERVED,
    ctype,
    float_literal,
)
from templtune.codegen.cuda.kernel import Kernel
from templtune.codegen.cuda.scalarize import scalarize
from templtune.codegen.cuda.sync import is_barrier
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
    Load,
    Ramp,
    SeqStmt,
    Stmt,
    Store,
)
from templtune.te.dispatch import Dispatch
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
    Select,
    Var,
    const_int,
)

# ---------------------------------------------------------------------------------- renderer


class _Renderer:
    def __init__(self, kernel: Kernel) -> None:
        self.k = kernel
        self.lines: list[str] = []
        self.indent = 1
        self.used_names: set[str] = set()
        self.var_names: dict[Var, str] = {}
        self.buf_names: dict[Buffer, str] = {}
        self.nonneg: set[Var] = set()
        self.helpers: set[str] = set()
        self.uses_half = False
        for tag, v in kernel.thread_vars:
            self.var_names[v] = f"((int){tag})"
            self.nonneg.add(v)

    # names
    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if base[0].isdigit() or base in _RESERVED:
            base = "v_" + base
        cand, i = base, 1
        while cand in self.used_names:
            cand = f"{base}_{i}"
            i += 1
        self.used_names.add(cand)
        return cand

    def buf(self, b: Buffer) -> str:
        name = self.buf_names.get(b)
        if name is None:
            raise CodegenError(f"buffer {b.name} is neither a kernel argument nor allocated")
        return name

    @contextmanager
    def bind(self, v: Var, nonneg: bool) -> Iterator[str]:
        old = self.var_names.get(v)
        name = self.fresh(v.name)
        self.var_names[v] = name
        if nonneg:
            self.nonneg.add(v)
        try:
            yield name
        finally:
            if old is None:
                self.var_names.pop(v, None)
            else:
                self.var_names[v] = old

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    # expressions
    def e(self, x: PrimExpr) -> str:
        return _EXPR(self, x)

    def binop(self, x: BinOp) -> str:
        a, b = self.e(x.a), self.e(x.b)
        is_f = dt.is_float(x.a.dtype)
        if x.op in (BinOpKind.MIN, BinOpKind.MAX):
            return f"{x.op.value}({a}, {b})"
        if x.op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD):
            if is_f:
                fl = "floorf" if x.dtype == "float32" else "floor"
                q = f"{fl}({a} / {b})"
                return q if x.op is BinOpKind.FLOORDIV else f"({a} - ({q} * {b}))"
            if is_nonneg(x.a, self.nonneg) and is_nonneg(x.b, self.nonneg):
                return f"({a} {'/' if x.op is BinOpKind.FLOORDIV else '%'} {b})"
            helper = "tt_floordiv" if x.op is BinOpKind.FLOORDIV else "tt_floormod"
            self.helpers.add(helper)
            return f"{helper}({a}, {b})"
        return f"({a} {_INFIX[x.op]} {b})"

    def call(self, x: Call) -> str:
        args = [self.e(a) for a in x.args]
        if x.name in ("likely", "unlikely"):
            return args[0]
        if x.name == "sigmoid":
            if x.dtype == "float64":
                return f"(1.0 / (1.0 + exp((-{args[0]}))))"
            return f"(1.000000e+00f / (1.000000e+00f + expf((-{args[0]}))))"
        if x.name in _MATH:
            if dt.is_int(x.dtype) and x.name == "abs":
                return f"abs({args[0]})"
            f32, f64 = _MATH[x.name]
            return f"{f64 if x.dtype == 'float64' else f32}({', '.join(args)})"
        if x.name in ("isnan", "isinf", "isfinite"):
            return f"{x.name}({args[0]})"
        if x.name == "popcount":
            return f"__popc({args[0]})"
        raise CodegenError(f"unknown intrinsic {x.name!r} for CUDA")

    # statements
    def s(self, st: Stmt) -> None:
        _STMT(self, st)

    def block(self, st: Stmt) -> None:
        self.indent += 1
        self.s(st)
        self.indent -= 1

    def loop(self, st: For) -> None:
        if st.kind is ForKind.THREAD_BINDING:
            raise CodegenError(f"binding loop {st.thread_tag} left in kernel {self.k.name}")
        mn, ext = self.e(st.min), st.extent
        nonneg = is_nonneg(st.min, self.nonneg)
        end = self.e(ext) if const_int(st.min) == 0 else self.e(st.min + ext)
        if st.kind in (ForKind.UNROLLED, ForKind.VECTORIZED):
            self.emit("#pragma unroll")
        with self.bind(st.loop_var, nonneg) as name:
            self.emit(f"for ({ctype(st.loop_var.dtype)} {name} = {mn}; {name} < {end}; ++{name}) {{")
            self.block(st.body)
            self.emit("}")

    def store(self, st: Store) -> None:
        if dt.lanes(st.index.dtype) != 1:
            idx, val = st.index, st.value
            assert isinstance(idx, Ramp) and isinstance(val, Load) and isinstance(val.index, Ramp)
            vt = ctype(dt.with_lanes(st.buffer.dtype, idx.lanes))
            self.emit(f"*({vt}*)({self.buf(st.buffer)} + {self.e(idx.base)}) = "
                      f"*({vt}*)({self.buf(val.buffer)} + {self.e(val.index.base)});")
            return
        text = f"{self.buf(st.buffer)}[{self.e(st.index)}] = {self.e(st.value)};"
        if st.predicate is not None:
            text = f"if ({self.e(st.predicate)}) {text}"
        self.emit(text)

    def render(self) -> str:
        k = self.k
        params = []
        for b in k.params:
            self.buf_names[b] = self.fresh(b.name)
            params.append(f"{ctype(b.dtype)}* __restrict__ {self.buf_names[b]}")
        for v in k.scalars:  # shape variables, passed by value after the buffers
            self.var_names[v] = name = self.fresh(v.name)
            self.nonneg.add(v)  # an array dimension
            params.append(f"{ctype(v.dtype)} {name}")
        for b in k.params:
            if dt.element_of(b.dtype) == "float16":
                self.uses_half = True
        for b in k.allocs:
            self.buf_names[b] = name = self.fresh(b.name)
            pre = "__shared__ " if b.scope == "shared" else ""
            self.emit(f"{pre}{ctype(b.dtype)} {name}[{buffer_size(b)}];")
        self.s(k.body)
        head = (f'extern "C" __global__ void __launch_bounds__({k.threads_per_block}) '
                f"{k.name}({', '.join(params)}) {{")
        return "\n".join([head, *self.lines, "}"]) + "\n"


# ------------------------------------------------------------------- expression table
_EXPR: Dispatch[str] = Dispatch(
    "CUDA expression",
    missing=lambda x: CodegenError(f"cannot render {type(x).__name__} {x} as CUDA C"))


@_EXPR.register(IntImm)
def _int(r: _Renderer, x: IntImm) -> str:
    if x.dtype == "bool":
        return "true" if x.value else "false"
    s = str(x.value)
    if x.dtype != "int32":
        return f"(({ctype(x.dtype)}){s})"
    return f"({s})" if x.value < 0 else s


@_EXPR.register(FloatImm)
def _float(r: _Renderer, x: FloatImm) -> str:
    if x.dtype == "float16":
        r.uses_half = True
    return float_literal(x.value, x.dtype)


@_EXPR.register(Var)
def _var(r: _Renderer, x: Var) -> str:
    name = r.var_names.get(x)
    if name is None:
        raise CodegenError(f"variable {x.name} is not bound in kernel {r.k.name} (a symbolic "
                           f"variable must be a whole dimension of an argument's shape)")
    return name


@_EXPR.register(BinOp)
def _binop(r: _Renderer, x: BinOp) -> str:
    return r.binop(x)


@_EXPR.register(Not)
def _not(r: _Renderer, x: Not) -> str:
    return f"(!{r.e(x.a)})"


@_EXPR.register(Cast)
def _cast(r: _Renderer, x: Cast) -> str:
    if x.dtype == "float16":
        r.uses_half = True
    return f"(({ctype(x.dtype)}){r.e(x.value)})"


@_EXPR.register(Select)
def _select(r: _Renderer, x: Select) -> str:
    return f"({r.e(x.cond)} ? {r.e(x.true_value)} : {r.e(x.false_value)})"


@_EXPR.register(Call)
def _call(r: _Renderer, x: Call) -> str:
    return r.call(x)


@_EXPR.register(Load)
def _load(r: _Renderer, x: Load) -> str:
    if dt.lanes(x.index.dtype) != 1:
        raise CodegenError("vector load outside an aligned vector copy (scalarize first)")
    text = f"{r.buf(x.buffer)}[{r.e(x.index)}]"
    if x.predicate is not None:
        return f"({r.e(x.predicate)} ? {text} : (({ctype(x.dtype)})0))"
    return text


# -------------------------------------------------------------------- statement table
_STMT: Dispatch[None] = Dispatch(
    "CUDA statement",
    missing=lambda st: CodegenError(f"cannot render statement {type(st).__name__} as CUDA C"))


@_STMT.register(SeqStmt)
def _seq(r: _Renderer, st: SeqStmt) -> None:
    for c in st.seq:
        r.s(c)


@_STMT.register(For)
def _for(r: _Renderer, st: For) -> None:
    if _is_prefetch(st.body):
        return  # the loop over a Stage.prefetch's lines, whose calls GPU code leaves out
    r.loop(st)


@_STMT.register(Store)
def _store(r: _Renderer, st: Store) -> None:
    r.store(st)


@_STMT.register(IfThenElse)
def _if(r: _Renderer, st: IfThenElse) -> None:
    r.emit(f"if ({r.e(st.condition)}) {{")
    r.block(st.then_case)
    if st.else_case is not None:
        r.emit("} else {")
        r.block(st.else_case)
    r.emit("}")


@_STMT.register(LetStmt)
def _let(r: _Renderer, st: LetStmt) -> None:
    value = r.e(st.value)
    with r.bind(st.var, is_nonneg(st.value, r.nonneg)) as name:
        r.emit(f"{ctype(st.var.dtype)} {name} = {value};")
        r.s(st.body)


@_STMT.register(AttrStmt)
def _attr(r: _Renderer, st: AttrStmt) -> None:
    r.s(st.body)


@_STMT.register(Allocate)
def _allocate(r: _Renderer, st: Allocate) -> None:
    b = st.buffer
    name = r.fresh(b.name)
    r.buf_names[b] = name
    pre = "__shared__ " if b.scope == "shared" else ""
    r.emit(f"{pre}{ctype(b.dtype)} {name}[{buffer_size(b)}];")
    r.s(st.body)


def _is_prefetch(st: Stmt) -> bool:
    # NOTE: Stage.prefetch is a CPU cache hint; GPU kernels stage data explicitly
    return isinstance(st, Evaluate) and isinstance(st.value, Call) and st.value.name == "prefetch"


@_STMT.register(Evaluate)
def _evaluate(r: _Renderer, st: Evaluate) -> None:
    if is_barrier(st):
        r.emit("__syncthreads();")
    elif _is_prefetch(st) or (isinstance(st.value, Call) and st.value.name == "tvm_noop"):
        return
    else:
        r.emit(f"{r.e(st.value)};")


def render_kernel(kernel: Kernel) -> tuple[str, set[str], bool]:
    """CUDA C of one kernel, the helper functions it uses and whether it needs ``half``."""
    kernel = replace(kernel, body=scalarize(kernel.body))
    r = _Renderer(kernel)
    text = r.render()
    return text, r.helpers, r.uses_half


def render_module(kernels: list[Kernel]) -> str:
    """The CUDA C translation unit of ``kernels`` (helpers first, then each kernel)."""
    bodies, helpers, half = [], set(), False
    for k in kernels:
        text, h, uh = render_kernel(k)
        bodies.append(text)
        helpers |= h
        half = half or uh
    head = ["// CUDA C generated by templtune"]
    if half:
        head.append("#include <cuda_fp16.h>")
    head.extend(_HELPERS[h] for h in sorted(helpers))
    return "\n".join(head) + "\n\n" + "\n".join(bodies)
