"""Rendering of scalar and vector expressions to LLVM IR text (a mixin of the function renderer).

Every rendered value is a pair ``(operand_text, dtype)``. Operators are table lookups keyed by the
op and the dtype class; the only branching code is for ops whose semantics differ from LLVM's
(floor division, guarded select, bool storage).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from templtune import dtype as dt
from templtune.codegen.llvm import types as T
from templtune.errors import CodegenError
from templtune.lower.ir import Broadcast, Load, Ramp
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
)

if TYPE_CHECKING:
    from templtune.lower.ir import Buffer

V = tuple[str, str]  # (operand text, dtype)

# (op, class) -> instruction; class is "f" (float), "s" (signed int/bool), "u" (unsigned)
_ARITH: dict[tuple[BinOpKind, str], str] = {
    (BinOpKind.ADD, "f"): "fadd contract", (BinOpKind.SUB, "f"): "fsub contract",
    (BinOpKind.MUL, "f"): "fmul contract", (BinOpKind.DIV, "f"): "fdiv",
    # NOTE: signed integer arithmetic is ``nsw`` (overflow is undefined, as in TVM): index
    # expressions then widen to 64-bit addressing for free instead of costing IndVarSimplify.
    (BinOpKind.ADD, "s"): "add nsw", (BinOpKind.SUB, "s"): "sub nsw",
    (BinOpKind.MUL, "s"): "mul nsw",
    (BinOpKind.DIV, "s"): "sdiv",
    (BinOpKind.ADD, "u"): "add", (BinOpKind.SUB, "u"): "sub", (BinOpKind.MUL, "u"): "mul",
    (BinOpKind.DIV, "u"): "udiv",
    (BinOpKind.AND, "s"): "and", (BinOpKind.OR, "s"): "or",
    (BinOpKind.AND, "u"): "and", (BinOpKind.OR, "u"): "or",
}
_CMP: dict[tuple[BinOpKind, str], str] = {
    (BinOpKind.EQ, "f"): "fcmp oeq", (BinOpKind.NE, "f"): "fcmp une",
    (BinOpKind.LT, "f"): "fcmp olt", (BinOpKind.LE, "f"): "fcmp ole",
    (BinOpKind.GT, "f"): "fcmp ogt", (BinOpKind.GE, "f"): "fcmp oge",
    (BinOpKind.EQ, "s"): "icmp eq", (BinOpKind.NE, "s"): "icmp ne",
    (BinOpKind.LT, "s"): "icmp slt", (BinOpKind.LE, "s"): "icmp sle",
    (BinOpKind.GT, "s"): "icmp sgt", (BinOpKind.GE, "s"): "icmp sge",
    (BinOpKind.EQ, "u"): "icmp eq", (BinOpKind.NE, "u"): "icmp ne",
    (BinOpKind.LT, "u"): "icmp ult", (BinOpKind.LE, "u"): "icmp ule",
    (BinOpKind.GT, "u"): "icmp ugt", (BinOpKind.GE, "u"): "icmp uge",
}
# float min/max as compare + select (NaN handling as C's a < b ? a : b)
_MINMAX_F = {BinOpKind.MIN: "fcmp olt", BinOpKind.MAX: "fcmp ogt"}
_MINMAX_I = {(BinOpKind.MIN, "s"): "smin", (BinOpKind.MAX, "s"): "smax",
             (BinOpKind.MIN, "u"): "umin", (BinOpKind.MAX, "u"): "umax"}
# unary float intrinsics that LLVM knows by name
_FLOAT_INTRIN = {
    "exp": "exp", "exp2": "exp2", "exp10": "exp10", "log": "log", "log2": "log2",
    "log10": "log10", "sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil",
    "round": "roundeven", "nearbyint": "nearbyint", "trunc": "trunc", "sin": "sin",
    "cos": "cos", "tan": "tan", "tanh": "tanh", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh",
}
_BINARY_FLOAT_INTRIN = {"pow": "pow", "copysign": "copysign", "atan2": "atan2"}
_BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
            "shift_left": "shl"}


def _cls(dtype: str) -> str:
    c = dt.parse(dtype).code
    return "f" if c == "float" else "u" if c == "uint" else "s"


_EXPR_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk(e: PrimExpr) -> list[PrimExpr]:
    """All expression nodes under ``e`` (a fast walk over expression-valued fields only)."""
    out: list[PrimExpr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        out.append(n)
        cls = type(n)
        names = _EXPR_FIELDS.get(cls)
        if names is None:
            names = tuple(f.name for f in dataclasses.fields(n)
                          if f.name not in ("dtype", "buffer", "name", "lanes", "op",
                                            "guarded", "value_index"))
            _EXPR_FIELDS[cls] = names
        for name in names:
            v = getattr(n, name)
            if isinstance(v, PrimExpr):
                stack.append(v)
            elif isinstance(v, tuple):
                stack.extend(x for x in v if isinstance(x, PrimExpr))
    return out


def _clampable(e: PrimExpr) -> bool:
    """True when ``e`` can be evaluated speculatively once its load indices are clamped: its
    loads read buffers with enough constant elements for index 0 (or a vector at 0), and it
    has no integer division by a non-constant divisor."""
    for n in _walk(e):
        if isinstance(n, Load):
            size = 1
            for d in n.buffer.shape:
                if not isinstance(d, IntImm):
                    return False
                size *= d.value
            if size < dt.lanes(n.index.dtype) or n.predicate is not None:
                return False
        elif isinstance(n, BinOp) and n.op in (BinOpKind.DIV, BinOpKind.FLOORDIV,
                                               BinOpKind.FLOORMOD):
            if not dt.is_float(n.dtype) and not isinstance(n.b, IntImm):
                return False
        elif isinstance(n, Select) and n.guarded and not (
                _clampable(n.true_value) and _clampable(n.false_value)):
            return False
    return True


_IMPURE = ("load", "call", "alloca", "phi")


class ExprRenderer:
    """Expression half of the LLVM function renderer. Subclasses provide ``emit``, ``tmp``,
    ``new_label``, ``start_block``, ``cur_block``, ``env``, ``buffer_ptr`` and ``declare``."""

    env: dict[Var, V]
    cur_block: str
    clamp: str | None = None  # i1 operand: while set, load indices are clamped to 0 when false
    cse: dict[str, str]  # instruction text -> result, for the current basic block
    vclamp: V | None = None  # <N x i1>: lanes whose vector loads may be performed

    # provided by the statement renderer
    def emit(self, line: str) -> None: ...  # pragma: no cover
    def tmp(self) -> str: ...  # pragma: no cover
    def new_label(self, hint: str) -> str: ...  # pragma: no cover
    def start_block(self, label: str) -> None: ...  # pragma: no cover
    def declare(self, line: str) -> None: ...  # pragma: no cover
    def buffer_ptr(self, buf: Buffer) -> str: ...  # pragma: no cover

    # ------------------------------------------------------------------------- helpers
    def op(self, text: str) -> str:
        """Emit ``%t = text`` and return ``%t``. A pure instruction whose exact text was already
        emitted in the current block is reused instead (local CSE: unrolled bodies repeat
        their index and guard arithmetic, and fewer instructions make LLVM faster)."""
        pure = not text.startswith(_IMPURE) or (text.startswith("call") and "@llvm." in text
                                                 and "@llvm.masked" not in text)
        if pure:
            hit = self.cse.get(text)
            if hit is not None:
                return hit
        t = self.tmp()
        self.emit(f"{t} = {text}")
        if pure:
            self.cse[text] = t
        return t

    def broadcast(self, v: V, lanes: int) -> V:
        text, d = v
        if dt.lanes(d) == lanes:
            return v
        if dt.lanes(d) != 1:
            raise CodegenError(f"cannot broadcast {d} to {lanes} lanes")
        vd = dt.with_lanes(d, lanes)
        if not text.startswith("%"):
            return f"splat ({T.ll_type(d)} {text})", vd
        ins = self.op(f"insertelement <{lanes} x {T.ll_type(d)}> poison, {T.ll_type(d)} {text}, i64 0")
        sh = self.op(f"shufflevector <{lanes} x {T.ll_type(d)}> {ins}, <{lanes} x {T.ll_type(d)}> "
                     f"poison, <{lanes} x i32> zeroinitializer")
        return sh, vd

    def cast_to(self, v: V, to: str) -> V:
        text, frm = v
        if frm == to:
            return v
        fd, td = dt.parse(frm), dt.parse(to)
        if fd.lanes != td.lanes:
            v = self.broadcast(v, td.lanes)
            text, frm = v
            fd = dt.parse(frm)
            if frm == to:
                return v
        ft, tt = T.ll_type(frm), T.ll_type(to)
        if td.code == "bool":
            zero = T.const(0, frm)
            cmp = "fcmp une" if fd.code == "float" else "icmp ne"
            return self.op(f"{cmp} {ft} {text}, {zero}"), to
        if fd.code == "float" and td.code == "float":
            if fd.bits == td.bits:
                return text, to
            ins = "fpext" if td.bits > fd.bits else "fptrunc"
        elif fd.code == "float":
            ins = "fptoui" if td.code == "uint" else "fptosi"
        elif td.code == "float":
            ins = "sitofp" if fd.code == "int" else "uitofp"
        else:
            if fd.bits == td.bits:
                return text, to
            if td.bits < fd.bits:
                ins = "trunc"
            else:
                ins = "sext" if fd.code == "int" else "zext"
        return self.op(f"{ins} {ft} {text} to {tt}"), to

    # ------------------------------------------------------------------------- dispatch
    def expr(self, e: PrimExpr) -> V:
        fn = getattr(self, "expr_" + type(e).__name__, None)
        if fn is None:
            raise CodegenError(f"the LLVM backend cannot render {type(e).__name__} ({e}); "
                               "TensorLoad/Reduce must be lowered away first")
        return fn(e)

    def expr_IntImm(self, e: IntImm) -> V:
        return T.const(e.value, e.dtype), e.dtype  # a vector dtype gives a splat

    def expr_FloatImm(self, e: FloatImm) -> V:
        return T.const(e.value, e.dtype), e.dtype

    def expr_Var(self, e: Var) -> V:
        v = self.env.get(e)
        if v is None:
            raise CodegenError(f"variable {e.name!r} is used but not bound (free variable in the "
                               "loop IR; pass shape variables as buffer shapes)")
        return v

    def expr_Cast(self, e: Cast) -> V:
        return self.cast_to(self.expr(e.value), e.dtype)

    def expr_Not(self, e: Not) -> V:
        text, d = self.cast_to(self.expr(e.a), dt.with_lanes("bool", dt.lanes(e.a.dtype)))
        return self.op(f"xor {T.ll_type(d)} {text}, {T.const(True, d)}"), d

    def expr_Broadcast(self, e: Broadcast) -> V:
        return self.broadcast(self.expr(e.value), e.lanes)

    def expr_Ramp(self, e: Ramp) -> V:
        if isinstance(e.stride, IntImm):
            # base splat + a constant step vector
            base = self.broadcast(self.expr(e.base), e.lanes)
            sd = dt.element_of(base[1])
            steps = ", ".join(f"{T.ll_type(sd)} {i * e.stride.value}" for i in range(e.lanes))
            return self.op(f"add nsw {T.ll_type(base[1])} {base[0]}, <{steps}>"), base[1]
        base = self.broadcast(self.expr(e.base), e.lanes)
        stride = self.broadcast(self.expr(e.stride), e.lanes)
        d = base[1]
        sd = dt.element_of(d)
        steps = ", ".join(f"{T.ll_type(sd)} {i}" for i in range(e.lanes))
        mul = self.op(f"mul {T.ll_type(d)} {stride[0]}, <{steps}>")
        return self.op(f"add {T.ll_type(d)} {base[0]}, {mul}"), d

    def _operands(self, e: BinOp) -> tuple[V, V, str]:
        a, b = self.expr(e.a), self.expr(e.b)
        n = max(dt.lanes(a[1]), dt.lanes(b[1]))
        a, b = self.broadcast(a, n), self.broadcast(b, n)
        if dt.element_of(a[1]) != dt.element_of(b[1]):
            pa, pb = dt.parse(a[1]), dt.parse(b[1])
            if pa.code in ("int", "uint") and pb.code in ("int", "uint") and pb.bits > pa.bits:
                a = self.cast_to(a, b[1])  # widen (64-bit loop variables meet int32 values)
            else:
                b = self.cast_to(b, a[1])
        return a, b, a[1]

    def expr_BinOp(self, e: BinOp) -> V:
        (x, d), (y, _), _ = self._operands(e)
        c, ty = _cls(d), T.ll_type(d)
        if e.op in (BinOpKind.AND, BinOpKind.OR) and dt.parse(d).code != "bool":
            bd = dt.with_lanes("bool", dt.lanes(d))
            x, y = self.cast_to((x, d), bd)[0], self.cast_to((y, d), bd)[0]
            d, c, ty = bd, "s", T.ll_type(bd)
        ins = _ARITH.get((e.op, c))
        if ins is not None:
            return self.op(f"{ins} {ty} {x}, {y}"), d
        ins = _CMP.get((e.op, c))
        if ins is not None:
            return self.op(f"{ins} {ty} {x}, {y}"), dt.with_lanes("bool", dt.lanes(d))
        if e.op in (BinOpKind.MIN, BinOpKind.MAX):
            if c == "f":
                m = self.op(f"{_MINMAX_F[e.op]} {ty} {x}, {y}")
                bty = T.ll_type(dt.with_lanes("bool", dt.lanes(d)))
                return self.op(f"select {bty} {m}, {ty} {x}, {ty} {y}"), d
            name = f"llvm.{_MINMAX_I[(e.op, c)]}.{T.suffix(d)}"
            self.declare(f"declare {ty} @{name}({ty}, {ty})")
            return self.op(f"call {ty} @{name}({ty} {x}, {ty} {y})"), d
        if e.op in (BinOpKind.FLOORDIV, BinOpKind.FLOORMOD):
            return self._floor_divmod(e.op, (x, d), (y, d), e.b)
        raise CodegenError(f"operator {e.op.name} is not supported for dtype {d}")

    def _floor_divmod(self, op: BinOpKind, a: V, b: V, b_expr: PrimExpr) -> V:
        (x, d), (y, _) = a, b
        ty = T.ll_type(d)
        c = _cls(d)
        if c == "f":
            q = self.op(f"fdiv {ty} {x}, {y}")
            name = f"llvm.floor.{T.suffix(d)}"
            self.declare(f"declare {ty} @{name}({ty})")
            fq = self.op(f"call {ty} @{name}({ty} {q})")
            if op is BinOpKind.FLOORDIV:
                return fq, d
            p = self.op(f"fmul {ty} {fq}, {y}")
            return self.op(f"fsub {ty} {x}, {p}"), d
        if c == "u":
            return self.op(f"{'udiv' if op is BinOpKind.FLOORDIV else 'urem'} {ty} {x}, {y}"), d
        bval = b_expr.value if isinstance(b_expr, IntImm) else None
        if bval is not None and bval > 0 and bval & (bval - 1) == 0:
            # NOTE: for a power-of-two divisor, floor semantics are exactly ashr / and.
            sh = bval.bit_length() - 1
            if op is BinOpKind.FLOORDIV:
                return self.op(f"ashr {ty} {x}, {T.const(sh, d)}"), d
            return self.op(f"and {ty} {x}, {T.const(bval - 1, d)}"), d
        q = self.op(f"sdiv {ty} {x}, {y}")
        r = self.op(f"srem {ty} {x}, {y}")
        bty = T.ll_type(dt.with_lanes("bool", dt.lanes(d)))
        zero = T.const(0, d)
        rnz = self.op(f"icmp ne {ty} {r}, {zero}")
        if bval is not None and bval > 0:
            # NOTE: positive constant divisor: the correction is needed only when r < 0.
            adj = self.op(f"icmp slt {ty} {r}, {zero}")
        else:
            rneg = self.op(f"icmp slt {ty} {r}, {zero}")
            bneg = self.op(f"icmp slt {ty} {y}, {zero}")
            sdiff = self.op(f"xor {bty} {rneg}, {bneg}")
            adj = self.op(f"and {bty} {sdiff}, {rnz}")
        if op is BinOpKind.FLOORDIV:
            one = self.op(f"zext {bty} {adj} to {ty}")
            return self.op(f"sub {ty} {q}, {one}"), d
        rb = self.op(f"add {ty} {r}, {y}")
        return self.op(f"select {bty} {adj}, {ty} {rb}, {ty} {r}"), d

    def expr_Select(self, e: Select) -> V:
        lanes = dt.lanes(e.dtype)
        cond_lanes = dt.lanes(e.cond.dtype)
        if e.guarded and cond_lanes == 1:
            return self._guarded_select(e)
        if e.guarded:
            return self._guarded_vector_select(e)
        c = self.cast_to(self.expr(e.cond), dt.with_lanes("bool", cond_lanes))
        t, f = self.expr(e.true_value), self.expr(e.false_value)
        n = max(lanes, dt.lanes(t[1]), dt.lanes(f[1]))
        t, f = self.broadcast(t, n), self.broadcast(f, n)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        if cond_lanes not in (1, n):
            c = self.broadcast(c, n)
        return self.op(f"select {T.ll_type(c[1])} {c[0]}, {T.ll_type(t[1])} {t[0]}, "
                       f"{T.ll_type(t[1])} {f[0]}"), t[1]

    def _narrow(self, c: str) -> None:
        """Restrict the clamp context by the scalar i1 ``c``."""
        self.clamp = c if self.clamp is None else self.op(f"and i1 {self.clamp}, {c}")
        if self.vclamp is not None:
            n = dt.lanes(self.vclamp[1])
            vc = self.broadcast((c, "bool"), n)
            self.vclamp = (self.op(f"and <{n} x i1> {self.vclamp[0]}, {vc[0]}"), self.vclamp[1])

    def _guarded_vector_select(self, e: Select) -> V:
        # NOTE: a lane-wise ``if_then_else``: vector loads in each branch are masked by the
        # lanes that take it; scalar loads are clamped unless some lane takes the branch.
        if not (_clampable(e.true_value) and _clampable(e.false_value)):
            raise CodegenError("a vector if_then_else over buffers of unknown size cannot be "
                               "rendered safely; do not vectorize this loop")
        n = dt.lanes(e.cond.dtype)
        bd = dt.with_lanes("bool", n)
        c = self.cast_to(self.expr(e.cond), bd)[0]
        nc = self.op(f"xor <{n} x i1> {c}, splat (i1 true)")
        outer, vouter = self.clamp, self.vclamp
        name = f"llvm.vector.reduce.or.v{n}i1"
        self.declare(f"declare i1 @{name}(<{n} x i1>)")
        vals = []
        try:
            for mask in (c, nc):
                self.clamp, self.vclamp = outer, vouter
                vm = mask if vouter is None else self.op(f"and <{n} x i1> {vouter[0]}, {mask}")
                anyl = self.op(f"call i1 @{name}(<{n} x i1> {vm})")
                self.clamp = anyl if outer is None else self.op(f"and i1 {outer}, {anyl}")
                self.vclamp = (vm, bd)
                vals.append(self.expr(e.true_value if mask is c else e.false_value))
        finally:
            self.clamp, self.vclamp = outer, vouter
        t, f = self.broadcast(vals[0], n), self.broadcast(vals[1], n)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        ty = T.ll_type(t[1])
        return self.op(f"select <{n} x i1> {c}, {ty} {t[0]}, {ty} {f[0]}"), t[1]

    def _guarded_select(self, e: Select) -> V:
        # NOTE: ``if_then_else`` must not evaluate the untaken branch (its loads may be out of
        # bounds, e.g. padding). When the only hazards in the taken branch are loads from
        # buffers of known size, it is rendered branch-free: every load index is clamped to 0
        # when the condition is false, then a ``select`` picks the value. That keeps padded
        # loops straight-line (vectorizable, fewer blocks, faster to compile). Otherwise it
        # becomes branches joined by a phi.
        c = self.cast_to(self.expr(e.cond), "bool")
        if _clampable(e.true_value) and _clampable(e.false_value):
            outer, vouter = self.clamp, self.vclamp
            nc = self.op(f"xor i1 {c[0]}, true")
            try:
                self._narrow(c[0])
                t = self.expr(e.true_value)
                self.clamp, self.vclamp = outer, vouter
                self._narrow(nc)
                f = self.expr(e.false_value)
            finally:
                self.clamp, self.vclamp = outer, vouter
            n = max(dt.lanes(t[1]), dt.lanes(f[1]))
            t, f = self.broadcast(t, n), self.broadcast(f, n)
            if f[1] != t[1]:
                f = self.cast_to(f, t[1])
            ty = T.ll_type(t[1])
            return self.op(f"select i1 {c[0]}, {ty} {t[0]}, {ty} {f[0]}"), t[1]
        lt, lf, lj = self.new_label("sel_t"), self.new_label("sel_f"), self.new_label("sel_j")
        self.emit(f"br i1 {c[0]}, label %{lt}, label %{lf}")
        self.start_block(lt)
        t = self.expr(e.true_value)
        t_end = self.cur_block
        self.emit(f"br label %{lj}")
        self.start_block(lf)
        f = self.expr(e.false_value)
        if f[1] != t[1]:
            f = self.cast_to(f, t[1])
        f_end = self.cur_block
        self.emit(f"br label %{lj}")
        self.start_block(lj)
        ty = T.ll_type(t[1])
        return self.op(f"phi {ty} [{t[0]}, %{t_end}], [{f[0]}, %{f_end}]"), t[1]

    # --------------------------------------------------------------------------- memory
    def address(self, buf: Buffer, index: PrimExpr) -> tuple[str, int, bool]:
        """Pointer to ``buf[index]``: (pointer or vector of pointers, lanes, contiguous)."""
        base = self.buffer_ptr(buf)
        ety = T.mem_type(dt.element_of(buf.dtype))
        lanes = dt.lanes(index.dtype)
        if self.clamp is not None and not (lanes > 1 and self.vclamp is not None):
            return self._clamped_address(base, ety, index, lanes)
        if lanes == 1:
            i = self.expr(index)
            return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), 1, True
        if isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1:
            i = self.expr(index.base)
            return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), lanes, True
        i = self.expr(index)
        return self.op(f"getelementptr inbounds {ety}, ptr {base}, {T.ll_type(i[1])} {i[0]}"), lanes, False

    def _clamped_address(self, base: str, ety: str, index: PrimExpr,
                         lanes: int) -> tuple[str, int, bool]:
        c = self.clamp
        if lanes > 1 and isinstance(index, Ramp) and isinstance(index.stride, IntImm) \
                and index.stride.value == 1:
            i = self.expr(index.base)
            contiguous = True
        else:
            i = self.expr(index)
            contiguous = lanes == 1
        ty = T.ll_type(i[1])
        zero = "zeroinitializer" if dt.lanes(i[1]) > 1 else "0"
        safe = self.op(f"select i1 {c}, {ty} {i[0]}, {ty} {zero}")
        return self.op(f"getelementptr inbounds {ety}, ptr {base}, {ty} {safe}"), lanes, contiguous

    def _mask(self, pred: PrimExpr | None, lanes: int) -> str:
        if pred is None:
            return "splat (i1 true)" if lanes > 1 else "true"
        return self.broadcast(self.cast_to(self.expr(pred), dt.with_lanes("bool", dt.lanes(pred.dtype))), lanes)[0]

    def expr_Load(self, e: Load) -> V:
        elem = dt.element_of(e.buffer.dtype)
        ptr, lanes, contiguous = self.address(e.buffer, e.index)
        vd = dt.with_lanes(elem, lanes)
        mty, al = T.mem_type(vd), T.align_of(elem)
        masked = lanes > 1 and (e.predicate is not None or self.vclamp is not None)
        if masked:
            mask = self._mask(e.predicate, lanes)
            if self.vclamp is not None:
                vm = self.broadcast(self.vclamp, lanes)[0]
                mask = self.op(f"and <{lanes} x i1> {mask}, {vm}")
            kind = "load" if contiguous else "gather"
            pty = "p0" if contiguous else f"v{lanes}p0"
            name = f"llvm.masked.{kind}.{T.suffix(vd) if elem != 'bool' else f'v{lanes}i8'}.{pty}"
            pt = "ptr" if contiguous else f"<{lanes} x ptr>"
            self.declare(f"declare {mty} @{name}({pt}, i32, <{lanes} x i1>, {mty})")
            v = self.op(f"call {mty} @{name}({pt} {ptr}, i32 {al}, <{lanes} x i1> {mask}, "
                        f"{mty} zeroinitializer)")
        elif contiguous:
            v = self.op(f"load {mty}, ptr {ptr}, align {al}")
        else:
            name = f"llvm.masked.gather.{T.suffix(vd) if elem != 'bool' else f'v{lanes}i8'}.v{lanes}p0"
            self.declare(f"declare {mty} @{name}(<{lanes} x ptr>, i32, <{lanes} x i1>, {mty})")
            v = self.op(f"call {mty} @{name}(<{lanes} x ptr> {ptr}, i32 {al}, "
                        f"<{lanes} x i1> splat (i1 true), {mty} poison)")
        if elem == "bool":
            v = self.op(f"icmp ne {mty} {v}, zeroinitializer")
        return v, vd

    def store(self, buf: Buffer, index: PrimExpr, value: PrimExpr, pred: PrimExpr | None) -> None:
        elem = dt.element_of(buf.dtype)
        v = self.expr(value)
        ptr, lanes, contiguous = self.address(buf, index)
        vd = dt.with_lanes(elem, lanes)
        v = self.broadcast(v, lanes)
        if v[1] != vd:
            v = self.cast_to(v, vd)
        mty, al = T.mem_type(vd), T.align_of(elem)
        x = v[0]
        if elem == "bool":
            x = self.op(f"zext {T.ll_type(vd)} {x} to {mty}")
        if pred is not None and lanes == 1:
            c = self.cast_to(self.expr(pred), "bool")
            ls, lj = self.new_label("st"), self.new_label("st_j")
            self.emit(f"br i1 {c[0]}, label %{ls}, label %{lj}")
            self.start_block(ls)
            self.emit(f"store {mty} {x}, ptr {ptr}, align {al}")
            self.emit(f"br label %{lj}")
            self.start_block(lj)
        elif pred is not None or not contiguous:
            mask = self._mask(pred, lanes)
            kind = "store" if contiguous else "scatter"
            pt = "ptr" if contiguous else f"<{lanes} x ptr>"
            sfx = T.suffix(vd) if elem != "bool" else f"v{lanes}i8"
            name = f"llvm.masked.{kind}.{sfx}.{'p0' if contiguous else f'v{lanes}p0'}"
            self.declare(f"declare void @{name}({mty}, {pt}, i32, <{lanes} x i1>)")
            self.emit(f"call void @{name}({mty} {x}, {pt} {ptr}, i32 {al}, <{lanes} x i1> {mask})")
        else:
            self.emit(f"store {mty} {x}, ptr {ptr}, align {al}")

    # ---------------------------------------------------------------------------- calls
    def expr_Call(self, e: Call) -> V:
        name = e.name
        if name in ("likely", "unlikely"):
            return self.expr(e.args[0])
        if name in ("tvm_storage_sync", "noop"):
            return "0", "int32"
        args = [self.expr(a) for a in e.args]
        n = max([dt.lanes(e.dtype)] + [dt.lanes(a[1]) for a in args])
        d = dt.with_lanes(dt.element_of(e.dtype), n)
        ty = T.ll_type(d)
        if name in _FLOAT_INTRIN or name in _BINARY_FLOAT_INTRIN or name == "fma":
            if not dt.is_float(d):
                raise CodegenError(f"intrinsic {name} needs a float argument, got {d}")
            args = [self.cast_to(self.broadcast(a, n), d) for a in args]
            llname = _FLOAT_INTRIN.get(name) or _BINARY_FLOAT_INTRIN.get(name) or "fma"
            full = f"llvm.{llname}.{T.suffix(d)}"
            self.declare(f"declare {ty} @{full}({', '.join([ty] * len(args))})")
            joined = ", ".join(f"{ty} {a[0]}" for a in args)
            return self.op(f"call {ty} @{full}({joined})"), d
        if name == "sigmoid":
            x = self.cast_to(self.broadcast(args[0], n), d)
            neg = self.op(f"fneg {ty} {x[0]}")
            full = f"llvm.exp.{T.suffix(d)}"
            self.declare(f"declare {ty} @{full}({ty})")
            ex = self.op(f"call {ty} @{full}({ty} {neg})")
            den = self.op(f"fadd {ty} {ex}, {T.const(1.0, d)}")
            return self.op(f"fdiv {ty} {T.const(1.0, d)}, {den}"), d
        if name in ("abs", "fabs_int"):
            x = self.cast_to(self.broadcast(args[0], n), d)
            if dt.is_float(d):
                return self.expr_Call(Call(e.dtype, "fabs", e.args))
            full = f"llvm.abs.{T.suffix(d)}"
            self.declare(f"declare {ty} @{full}({ty}, i1)")
            return self.op(f"call {ty} @{full}({ty} {x[0]}, i1 false)"), d
        if name in _BITWISE or name in ("shift_right", "bitwise_not"):
            xs = [self.cast_to(self.broadcast(a, n), d) for a in args]
            if name == "bitwise_not":
                return self.op(f"xor {ty} {xs[0][0]}, {T.const(-1, d)}"), d
            ins = _BITWISE.get(name) or ("lshr" if dt.parse(d).code == "uint" else "ashr")
            return self.op(f"{ins} {ty} {xs[0][0]}, {xs[1][0]}"), d
        if name == "isnan":
            x = args[0]
            bd = dt.with_lanes("bool", dt.lanes(x[1]))
            return self.op(f"fcmp uno {T.ll_type(x[1])} {x[0]}, {x[0]}"), bd
        raise CodegenError(f"unknown intrinsic {name!r} for the LLVM backend")

    # ------------------------------------------------------------------------- utilities
    def as_bool(self, e: PrimExpr) -> str:
        return self.cast_to(self.expr(e), "bool")[0]

    def with_env(self, var: Var, value: V) -> Any:
        self.env[var] = value
        return value
