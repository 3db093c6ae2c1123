"""A reference interpreter for loop IR: runs a :class:`PrimFunc` on numpy arrays in pure Python.

It is the correctness oracle for lowering (and usable by backends as a reference): the function
is translated into Python source (one statement per IR statement, vectors lane by lane, thread
loops run serially) and executed on flat Python lists copied from the arguments; results are
copied back into the arrays. Scalars compute in Python floats/ints (float64 for float32 data, no
integer wrap-around), which is exact enough for ``assert_allclose`` against numpy. Freshly
allocated float buffers are filled with NaN so that reading an element nobody wrote shows up.

Fine for small sizes only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from templtune import dtype as dt
from templtune.errors import RuntimeCallError
from templtune.lower.ir import (
    Allocate,
    AttrStmt,
    Broadcast,
    Buffer,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    SeqStmt,
    Shuffle,
    Stmt,
    Store,
)
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
    StringImm,
    Var,
)

_MAX_BLOCKS = 12  # Python allows 20 statically nested blocks per function


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


_CALLS: dict[str, str] = {
    "exp": "_m.exp", "log": "_m.log", "sqrt": "_m.sqrt", "tanh": "_m.tanh", "fabs": "abs",
    "abs": "abs", "floor": "_m.floor", "ceil": "_m.ceil", "pow": "_m.pow", "power": "_m.pow",
    "erf": "_m.erf", "sigmoid": "_sigmoid", "exp2": "_exp2", "log2": "_m.log2",
    "log10": "_m.log10", "trunc": "_m.trunc", "round": "round",
}
_ARITH = {BinOpKind.ADD: "+", BinOpKind.SUB: "-", BinOpKind.MUL: "*", BinOpKind.EQ: "==",
          BinOpKind.NE: "!=", BinOpKind.LT: "<", BinOpKind.LE: "<=", BinOpKind.GT: ">",
          BinOpKind.GE: ">=", BinOpKind.AND: "and", BinOpKind.OR: "or"}


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[Any, str] = {}
        self.used: set[str] = set()
        self.nfn = 0

    def name(self, key: Any, hint: str) -> str:
        n = self.names.get(key)
        if n is None:
            base = "v_" + re.sub(r"\W", "_", hint)
            n, k = base, 0
            while n in self.used:
                k += 1
                n = f"{base}_{k}"
            self.used.add(n)
            self.names[key] = n
        return n

    def buf(self, b: Buffer) -> str:
        return self.name(b, "b_" + b.name)

    # ------------------------------------------------------------------------ expressions

    def e(self, x: PrimExpr, lane: int = 0) -> str:
        if isinstance(x, IntImm):
            return ("True" if x.value else "False") if x.dtype == "bool" else repr(x.value)
        if isinstance(x, FloatImm):
            v = float(x.value)
            return repr(v) if math.isfinite(v) else f"float('{v}')"
        if isinstance(x, Var):
            return self.name(x, x.name)
        if isinstance(x, Ramp):
            return f"({self.e(x.base)} + {lane} * {self.e(x.stride)})"
        if isinstance(x, Broadcast):
            return self.e(x.value)
        if isinstance(x, Shuffle):
            return self.e(x.vector, x.indices[lane])
        if isinstance(x, Load):
            idx = self.e(x.index, lane)
            if x.predicate is not None:  # a masked-off lane reads nothing (it may lie outside)
                return f"({self.buf(x.buffer)}[{idx}] if {self.e(x.predicate, lane)} else 0)"
            return f"{self.buf(x.buffer)}[{idx}]"
        if isinstance(x, BinOp):
            a, b = self.e(x.a, lane), self.e(x.b, lane)
            fl = dt.is_float(x.a.dtype)
            op = x.op
            if op in _ARITH:
                return f"({a} {_ARITH[op]} {b})"
            if op is BinOpKind.DIV:
                return f"({a} / {b})" if fl else f"_tdiv({a}, {b})"
            if op is BinOpKind.FLOORDIV:
                return f"_m.floor({a} / {b})" if fl else f"({a} // {b})"
            if op is BinOpKind.FLOORMOD:
                return f"({a} % {b})"
            if op is BinOpKind.MIN:
                return f"min({a}, {b})"
            if op is BinOpKind.MAX:
                return f"max({a}, {b})"
        if isinstance(x, Not):
            return f"(not {self.e(x.a, lane)})"
        if isinstance(x, Cast):
            sv = self.e(x.value, lane)
            d = dt.parse(x.dtype)
            if d.code == "float":
                return f"float({sv})"
            if d.code == "bool":
                return f"bool({sv})"
            return f"int({sv})"
        if isinstance(x, Select):
            c = self.e(x.cond, lane)
            return f"({self.e(x.true_value, lane)} if {c} else {self.e(x.false_value, lane)})"
        if isinstance(x, Call):
            if x.name == "likely":
                return self.e(x.args[0], lane)
            fn = _CALLS.get(x.name)
            if fn is None:
                raise RuntimeCallError(f"interpreter: unsupported intrinsic {x.name!r}")
            return f"{fn}({', '.join(self.e(a, lane) for a in x.args)})"
        if isinstance(x, StringImm):
            return repr(x.value)
        raise RuntimeCallError(f"interpreter: unsupported expression {type(x).__name__}")

    # ------------------------------------------------------------------------- statements

    def s(self, st: Stmt, ind: int, depth: int) -> None:
        pad = "    " * ind
        if isinstance(st, SeqStmt):
            if not st.seq:
                self.lines.append(pad + "pass")
            for x in st.seq:
                self.s(x, ind, depth)
        elif isinstance(st, For):
            if depth >= _MAX_BLOCKS:
                # NOTE: start a nested function to stay below Python's block-nesting limit
                self.nfn += 1
                fn = f"_f{self.nfn}"
                self.lines.append(f"{pad}def {fn}():")
                self.s(st, ind + 1, 0)
                self.lines.append(f"{pad}{fn}()")
                return
            v = self.e(st.loop_var)
            lo = self.e(st.min)
            self.lines.append(f"{pad}for {v} in range({lo}, {lo} + {self.e(st.extent)}):")
            self.s(st.body, ind + 1, depth + 1)
        elif isinstance(st, Store):
            n = dt.lanes(st.index.dtype)
            b = self.buf(st.buffer)
            if n == 1:
                self.lines.append(f"{pad}{b}[{self.e(st.index)}] = {self.e(st.value)}")
            else:
                vals = ", ".join(self.e(st.value, i) for i in range(n))
                idxs = ", ".join(self.e(st.index, i) for i in range(n))
                self.lines.append(f"{pad}for _i, _v in zip(({idxs},), ({vals},)):")
                self.lines.append(f"{pad}    {b}[_i] = _v")
        elif isinstance(st, IfThenElse):
            self.lines.append(f"{pad}if {self.e(st.condition)}:")
            self.s(st.then_case, ind + 1, depth)
            if st.else_case is not None:
                self.lines.append(f"{pad}else:")
                self.s(st.else_case, ind + 1, depth)
        elif isinstance(st, LetStmt):
            self.lines.append(f"{pad}{self.e(st.var)} = {self.e(st.value)}")
            self.s(st.body, ind, depth)
        elif isinstance(st, Allocate):
            buf = st.buffer
            size = 1
            for d in buf.shape:
                size *= int(d.value)  # type: ignore[attr-defined]
            fill = "float('nan')" if dt.is_float(buf.dtype) else "0"
            self.lines.append(f"{pad}{self.buf(buf)} = [{fill}] * {size}")
            self.s(st.body, ind, depth)
        elif isinstance(st, AttrStmt):
            self.s(st.body, ind, depth)
        elif isinstance(st, Evaluate):
            if isinstance(st.value, Call) and (st.value.name.startswith("tvm_storage_sync")
                                               or st.value.name == "prefetch"):
                self.lines.append(f"{pad}pass")
            else:
                self.lines.append(f"{pad}{self.e(st.value)}")
        else:
            raise RuntimeCallError(f"interpreter: unsupported statement {type(st).__name__}")


def _exp2(x: float) -> float:
    return 2.0 ** x


def source(func: PrimFunc) -> str:
    """The Python source the interpreter runs for ``func`` (for debugging)."""
    g = _Gen()
    params = [g.buf(b) for b in func.params]
    g.lines.append(f"def _kernel({', '.join(params)}):")
    g.s(func.body, 1, 0)
    g.lines.append("    return")
    return "\n".join(g.lines)


def compile_func(func: PrimFunc) -> Callable[..., None]:
    """Translate ``func``; the result takes numpy arrays (one per parameter) and writes the
    outputs into them."""
    src = source(func)
    env: dict[str, Any] = {"_m": math, "_tdiv": _tdiv, "_sigmoid": _sigmoid, "_exp2": _exp2}
    exec(compile(src, f"<interp {func.name}>", "exec"), env)
    kernel = env["_kernel"]

    def call(*arrays: Any) -> None:
        if len(arrays) != len(func.params):
            raise RuntimeCallError(f"{func.name} takes {len(func.params)} arguments, got "
                                   f"{len(arrays)}")
        lists = []
        for a, b in zip(arrays, func.params):
            shape = tuple(int(d.value) for d in b.shape)  # type: ignore[attr-defined]
            if not isinstance(a, np.ndarray) or a.shape != shape:
                raise RuntimeCallError(f"argument {b.name}: expected an array of shape {shape}, "
                                       f"got {getattr(a, 'shape', type(a).__name__)}")
            lists.append(a.reshape(-1).tolist())
        kernel(*lists)
        for a, lst in zip(arrays, lists):
            a.reshape(-1)[:] = np.asarray(lst, dtype=a.dtype)

    return call


def run(func: PrimFunc, *arrays: Any) -> None:
    """Interpret ``func`` once on ``arrays`` (outputs are written in place)."""
    compile_func(func)(*arrays)
