"""Rendering of scalar and vector expressions to LLVM IR text (a mixin of the function renderer).

Every rendered value is a pair ``(operand_text, dtype)``. Operators are table lookups keyed by the
op and the dtype class; the only branching code is for ops whose semantics differ from LLVM's
(floor division, guarded select, bool storage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from templtune import dtype as dt
from templtune.codegen.llvm import types as T
from templtune.codegen.llvm.vmath import VMATH, MathCalls
from templtune.errors import CodegenError
from templtune.lower.ir import Broadcast, Ramp, Shuffle
from templtune.te.dispatch import Dispatch, handles, method_tables
from templtune.te.expr import (
    BinOp,
    BinOpKind,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Not,
    PrimExpr,
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


_IMPURE = ("load", "call", "alloca", "phi")


class ExprRenderer(MathCalls):
    """Expression half of the LLVM function renderer. Subclasses provide ``emit``, ``tmp``,
    ``new_label``, ``start_block``, ``cur_block``, ``env``, ``buffer_ptr`` and ``declare``."""

    env: dict[Var, V]
    cur_block: str
    clamp: str | None = None  # i1 operand: while set, load indices are clamped to 0 when false
    cse: dict[str, str]  # instruction text -> result, for the current basic block
    vclamp: V | None = None  # <N x i1>: lanes whose vector loads may be performed

    # provided by the statement renderer
    def emit(self, line: str) -> None: ...  # pragma: no cover
    def tmp(self) -> str: raise NotImplementedError  # pragma: no cover
    def new_label(self, hint: str) -> str: raise NotImplementedError  # pragma: no cover
    def start_block(self, label: str) -> None: ...  # pragma: no cover
    def declare(self, line: str) -> None: ...  # pragma: no cover
    def buffer_ptr(self, buf: Buffer) -> str: raise NotImplementedError  # pragma: no cover
    def prefetch(self, e: Any) -> None: ...  # pragma: no cover

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
        if fd.lanes == 1 and fd.code in ("int", "uint") and text.lstrip("-").isdigit():
            # fold casts of integer literals (loop bounds, index constants)
            val = int(text)
            if td.code in ("int", "uint"):
                val &= (1 << td.bits) - 1
                if td.code == "int" and val >= 1 << (td.bits - 1):
                    val -= 1 << td.bits
                return T.scalar_const(val, to), to
            if td.code == "float":
                return T.scalar_const(float(val), to), to
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
    _tables: dict[str, Dispatch[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tables = _tables(cls)

    def expr(self, e: PrimExpr) -> V:
        return self._tables["expr"](self, e)  # type: ignore[no-any-return]

    @handles(IntImm, table="expr")
    def expr_IntImm(self, e: IntImm) -> V:
        return T.const(e.value, e.dtype), e.dtype  # a vector dtype gives a splat

    @handles(FloatImm, table="expr")
    def expr_FloatImm(self, e: FloatImm) -> V:
        return T.const(e.value, e.dtype), e.dtype

    @handles(Var, table="expr")
    def expr_Var(self, e: Var) -> V:
        v = self.env.get(e)
        if v is None:
            raise CodegenError(f"variable {e.name!r} is used but not bound (free variable in the "
                               "loop IR; pass shape variables as buffer shapes)")
        return v

    # NOTE: lanes are taken from the rendered operands, not the node's dtype, so that a scalar
    # node over vector operands (hand-built IR) still renders as a vector.
    @handles(Cast, table="expr")
    def expr_Cast(self, e: Cast) -> V:
        v = self.expr(e.value)
        n = max(dt.lanes(v[1]), dt.lanes(e.dtype))
        return self.cast_to(v, dt.with_lanes(dt.element_of(e.dtype), n))

    @handles(Not, table="expr")
    def expr_Not(self, e: Not) -> V:
        v = self.expr(e.a)
        text, d = self.cast_to(v, dt.with_lanes("bool", dt.lanes(v[1])))
        return self.op(f"xor {T.ll_type(d)} {text}, {T.const(True, d)}"), d

    @handles(Broadcast, table="expr")
    def expr_Broadcast(self, e: Broadcast) -> V:
        return self.broadcast(self.expr(e.value), e.lanes)

    @handles(Shuffle, table="expr")
    def expr_Shuffle(self, e: Shuffle) -> V:
        text, d = self.expr(e.vector)
        ty = f"<{dt.lanes(d)} x {T.ll_type(dt.element_of(d))}>"
        if len(e.indices) == 1:  # a scalar (a reduction tree's last step)
            return (self.op(f"extractelement {ty} {text}, i32 {e.indices[0]}"),
                    dt.element_of(d))
        mask = ", ".join(f"i32 {i}" for i in e.indices)
        return (self.op(f"shufflevector {ty} {text}, {ty} poison, <{len(e.indices)} x i32> "
                        f"<{mask}>"), dt.with_lanes(dt.element_of(d), len(e.indices)))

    @handles(Ramp, table="expr")
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

    @handles(BinOp, table="expr")
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

    # ---------------------------------------------------------------------------- calls
    @handles(Call, table="expr")
    def expr_Call(self, e: Call) -> V:
        name = e.name
        if name in ("likely", "unlikely"):
            return self.expr(e.args[0])
        if name in ("tvm_storage_sync", "noop"):
            return "0", "int32"
        if name == "prefetch":
            self.prefetch(e.args[0])
            return "0", "int32"
        args = [self.expr(a) for a in e.args]
        n = max([dt.lanes(e.dtype)] + [dt.lanes(a[1]) for a in args])
        d = dt.with_lanes(dt.element_of(e.dtype), n)
        ty = T.ll_type(d)
        if name in VMATH and dt.element_of(d) == "float32":
            return self.vmath(name, self.cast_to(self.broadcast(args[0], n), d)), d
        if name == "erf":
            return self.libm_erf(self.cast_to(self.broadcast(args[0], n), d)), d
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


def _tables(cls: type) -> dict[str, Dispatch[Any]]:
    """The ``expr`` and ``stmt`` tables of a renderer class (its ``@handles`` methods)."""
    return method_tables(cls, {"expr": None, "stmt": None}, missing={
        "expr": lambda e: CodegenError(f"the LLVM backend cannot render {type(e).__name__} "
                                       f"({e}); TensorLoad/Reduce must be lowered away first"),
        "stmt": lambda s: CodegenError(f"the LLVM backend cannot render statement "
                                       f"{type(s).__name__}")})


ExprRenderer._tables = _tables(ExprRenderer)
